"""What every measurement gets: the loaded engine, the model, the sizes and a logger.

Measurements talk to the engine through its public API, except where they must run
plain mlx-lm or read logits on the engine's own model object; `loaded_model` returns
that object (read on the engine thread, where MLX objects live).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.bench.settings import BenchSettings
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.text.synthetic_text import filler

if TYPE_CHECKING:  # the engine imports mlx
    from app.core.engine.engine import Engine
    from app.core.engine.loader import LoadedModel

SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and precisely."


def greedy(max_tokens: int) -> SamplingSettings:
    """Greedy sampling for ``max_tokens`` tokens (reproducible, as mlx-lm's default)."""
    return SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=max_tokens, seed=0)


def kv_settings(bits: int) -> KVSettings:
    """KV precision as the app uses it: group 64, quantized from the first token."""
    return KVSettings(bits=bits, group_size=64, quantized_kv_start=0)


@dataclass
class BenchContext:
    """Shared state of one benchmark run.

    Attributes:
        engine: A loaded `Engine`.
        model_dir: The model folder.
        settings: The sizes of this run.
        out_dir: Where results go (parts may keep scratch files under it).
        log: Prints one progress line (to stderr in the CLI).
        scratch: Folder for temporary files of this run.
        limits: The machine's `limits.Limits`, once measured in this run.
    """

    engine: Engine
    model_dir: Path
    settings: BenchSettings
    out_dir: Path
    log: Callable[[str], None] = print
    scratch: Path | None = None
    limits: object | None = None  # a `limits.Limits` (that module imports this one)
    _prompt_cache: dict = field(default_factory=dict)

    def loaded_model(self) -> LoadedModel:
        """Return the engine's `LoadedModel` (model, tokenizer, config).

        Only use its MLX objects on the engine thread (`engine.submit`).
        """
        engine = self.engine
        return engine.submit(engine._require_model).result()

    def filler(self, tokens: int, seed: int = 0) -> str:
        """Deterministic text of about ``tokens`` tokens for this model's tokenizer."""
        return filler(tokens, self.engine.count_tokens, seed)

    def prompt_ids(self, tokens: int, seed: int = 0) -> list[int]:
        """Return exactly ``tokens`` ids: a chat prompt (system + long user message).

        Prompts of one seed are prefixes of each other, so a cache filled for a short
        one is reused by a longer one.
        """
        longest = self._prompt_cache.get(seed, [])
        if len(longest) < tokens:
            text = self.filler(tokens + 64, seed)
            longest = self.engine.render(
                [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": text},
                ]
            )
            if len(longest) < tokens:
                raise RuntimeError(
                    f"prompt of {len(longest)} tokens is shorter than {tokens}"
                )
            self._prompt_cache[seed] = longest
        return list(longest[:tokens])


def make_engine(scratch: Path):
    """Return an `Engine` whose prefix-cache files go to ``scratch``, not the user's.

    The run's engine and the parts' own (the reference model, each architecture).
    """
    import inspect

    from app.core.engine.engine import Engine

    if "prefix_cache" not in inspect.signature(Engine).parameters:
        return Engine()
    from app.core.engine.cache.prefix_cache import PrefixCache, PrefixCacheSettings

    settings = PrefixCacheSettings(folder=scratch / "prefix-cache")
    return Engine(prefix_cache=PrefixCache(settings))


class Stopwatch:
    """``with Stopwatch() as w: ...`` then ``w.seconds``."""

    def __enter__(self) -> Stopwatch:
        self.started = time.perf_counter()
        self.seconds = 0.0
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.started
