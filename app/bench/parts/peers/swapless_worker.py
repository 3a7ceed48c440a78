"""Swapless's side of the llama.cpp comparison, in a process of its own.

``llama-bench`` is a process of its own, so its peak RSS is its alone; this worker
gives Swapless the same: one process per thread count, the engine loaded once, and the
parent (`peers`) sends one JSON command per line on stdin, alternating with
``llama-bench`` runs so the two never compete for the CPU. Answers are single stdout
lines starting with `MARKER`.

Threads: the parent sets the BLAS's thread variables (``BLIS_NUM_THREADS`` and the
like) before MLX starts; the worker sets the native kernel's own count. Prompts are
random token ids, as llama-bench's are.
"""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

MARKER = "@@swapless-peers "


def _emit(data: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(data) + "\n")
    sys.stdout.flush()


def peak_rss_bytes() -> int:
    """This process's peak resident set so far.

    On Linux ``VmHWM``: ``ru_maxrss`` of a process started by a big one (the bench)
    includes the parent's high-water mark, carried across fork and exec.
    """
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def _ids(count: int, vocab: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(count)]


class _Chat:
    """A conversation with Swapless's defaults (the default preset: its KV bits, its
    trims), greedy and ``chat_max_tokens`` a reply, started at the first ``chat``."""

    def __init__(self, engine, folder: str, scratch: Path, config: dict):
        self._engine, self._folder, self._scratch = engine, folder, scratch
        self._max_tokens = int(config.get("chat_max_tokens", 64))
        self._session: Any = None  # a ConversationSession, from the first turn

    def turn(self, text: str) -> dict:
        from app.core.chat.conversation_session import ConversationSession
        from app.core.presets.presets import DEFAULT_PRESET, get_preset
        from app.core.store import Store

        if self._session is None:
            store = Store.open(self._scratch / "chat.db")
            preset = get_preset(DEFAULT_PRESET).with_changes(
                max_tokens=self._max_tokens, temperature=0.0, top_p=1.0
            )
            self._session = ConversationSession.start(
                self._engine, store, preset, model=self._folder, seed=0
            )
        started = time.perf_counter()
        report = self._session.send(text).wait()
        state = self._engine.cache_state(self._session.cache_key)
        return {
            "wall_s": time.perf_counter() - started,
            "ttft_s": report.ttft_s,
            "generated_tokens": report.generated_tokens,
            "new_tokens": report.new_tokens,
            "context_tokens": state.tokens,
            "kv_bytes": state.kv_bytes,
            "trimmed": report.trimmed,
        }


def main(argv: list[str]) -> int:
    """Load the model, then answer ``prefill``, ``decode`` and ``chat`` commands until
    ``quit``.

    Args:
        argv: One JSON object: ``model`` (folder), ``threads``, ``scratch`` (folder for
            the engine's prefix cache and the chat's database), ``chat_max_tokens``.
    """
    from app.bench.context import greedy, kv_settings, make_engine
    from app.core.engine.cpu import backend, native_kernel

    config = json.loads(argv[0])
    threads = int(config["threads"])
    kernel = native_kernel.load_module()
    if kernel is not None:
        kernel.set_threads(threads)
    engine = make_engine(Path(config["scratch"]))
    info = engine.load(config["model"])
    vocab = int(engine.submit(engine._require_model).result().tokenizer.vocab_size)
    kv = kv_settings(16)  # llama.cpp's default KV is f16: Swapless's "16-bit" cache
    # Warm-up: the first calls compile MLX kernels and grow its buffer pool.
    engine.prefill("warm", _ids(64, vocab, 0), kv)
    engine.generate("warm", _ids(65, vocab, 0), kv, greedy(2)).wait()
    engine.drop_cache("warm")
    state = backend.kernel_state()
    chat = _Chat(engine, info.folder, Path(config["scratch"]), config)
    _emit(
        {
            "ready": True,
            "weights_bytes": info.weights_bytes,
            "activation_dtype": info.activation_dtype,
            "kernel_used": state.used,
            "kernel_reason": state.reason,
            "kernel_threads": kernel.threads() if kernel is not None else None,
            "vocab": vocab,
            "peak_rss_bytes": peak_rss_bytes(),
        }
    )
    for line in sys.stdin:
        command = json.loads(line)
        op = command.get("op")
        if op == "prefill":
            key = f"prefill-{command['seed']}"
            engine.drop_cache(key)
            report = engine.prefill(
                key, _ids(command["tokens"], vocab, command["seed"]), kv
            )
            engine.drop_cache(key)  # its memory counts in the peak, not in what follows
            answer = {
                "tps": report.computed_tokens / report.seconds,
                "seconds": report.seconds,
                "tokens": report.computed_tokens,
            }
        elif op == "decode":
            depth, seed = command["depth"], command["seed"]
            ids = _ids(depth + 1, vocab, seed)
            key = f"depth-{depth}-{seed}"
            started = time.perf_counter()
            filled = engine.prefill(key, ids[:depth], kv)  # cut back after a repetition
            if filled.computed_tokens:
                # A fresh depth: one untimed short reply first, as llama-bench warms up.
                engine.generate(key, ids, kv, greedy(2)).wait()
                engine.prefill(key, ids[:depth], kv)
            final = engine.generate(key, ids, kv, greedy(command["tokens"])).wait()
            answer = {
                "tps": final.tokens_per_s,
                "generated": final.generated_tokens,
                "fill_s": filled.seconds,
                "kv_bytes": final.kv_bytes,
                "wall_s": time.perf_counter() - started,
            }
        elif op == "chat":
            answer = chat.turn(command["text"])
        elif op == "drop":
            engine.drop_cache(command["key"])
            answer = {}
        else:
            break
        _emit({**answer, "peak_rss_bytes": peak_rss_bytes()})
    engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
