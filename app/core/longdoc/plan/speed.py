"""How fast this machine reads and writes with a model: measured, remembered, predicted.

A plan that says "about 7 minutes" must come from this machine, not from a guess, and
"auto" refuses a whole read whose prefill would take many minutes. So every step of a
reading (and a short probe the first time a model is used) records what it measured:
prefill spans (tokens from one context length to another, seconds) and decode speeds
at a context length. A small model is fitted to them:

    prefill seconds(start → end) = a·n + b·(end² − start²)/2      (n = end − start)
    seconds per generated token at context c = c0 + d·c

``a`` is the per-token cost of the weights, ``b`` the attention's growth with context
(every new token attends to every cached one), both fitted by weighted least squares
with non-negative coefficients. Samples are kept per model and KV precision in one
small JSON file in the app home (`paths.speed_record_path`), newest last, so the
estimate improves with use. Pure Python; the probe that feeds a new model runs in the
runner, through the engine.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.files import bounded_read, paths, private_files

log = logging.getLogger(__name__)

MAX_SAMPLES = 64
MAX_FILE_BYTES = 2**20
"""Far above what `MAX_SAMPLES` rows per key take."""
"""Samples kept per model and precision (the newest)."""
MIN_DECODE_SAMPLE_TOKENS = 4
"""Generated tokens below which a step's decode speed is too noisy to keep."""


@dataclass(frozen=True)
class PrefillSample:
    """Prompt tokens computed from one context length to another, and how long it took."""

    # Token positions; floats when read back from the speed record's JSON.
    start: float
    end: float
    seconds: float


@dataclass(frozen=True)
class DecodeSample:
    """Decode speed measured at a context length."""

    context: float  # a token position (a float when read back from JSON)
    tokens_per_s: float


@dataclass(frozen=True)
class SpeedModel:
    """Predicted prefill and decode times of one model at one KV precision.

    Attributes:
        per_token_s: ``a``: prefill seconds per token, at no context.
        per_token_context_s: ``b``: extra prefill seconds per token per cached token.
        decode_base_s: ``c0``: seconds per generated token at no context.
        decode_context_s: ``d``: extra seconds per generated token per cached token.
        samples: Measurements the fit used.
    """

    per_token_s: float
    per_token_context_s: float
    decode_base_s: float
    decode_context_s: float
    samples: int

    def prefill_seconds(self, start: int, end: int) -> float:
        """Seconds to read the prompt tokens from context ``start`` to ``end``."""
        n = max(0, end - start)
        return (
            self.per_token_s * n
            + self.per_token_context_s * (end * end - start * start) / 2
        )

    def decode_seconds(self, context: int, tokens: int) -> float:
        """Seconds to generate ``tokens`` tokens on top of ``context`` cached ones."""
        middle = context + tokens / 2
        return tokens * (self.decode_base_s + self.decode_context_s * middle)

    def prefill_tokens_per_s(self, context: int) -> float:
        """Prefill speed around a context length."""
        cost = self.per_token_s + self.per_token_context_s * context
        return 1 / cost if cost > 0 else 0.0

    def decode_tokens_per_s(self, context: int) -> float:
        """Decode speed at a context length."""
        cost = self.decode_base_s + self.decode_context_s * context
        return 1 / cost if cost > 0 else 0.0

    def describe(self, context: int) -> str:
        """The measured speeds in words, e.g. for the plan's tooltip."""
        return (
            f"prefill {self.prefill_tokens_per_s(1024):,.0f} tok/s at 1K and "
            f"{self.prefill_tokens_per_s(context):,.0f} at {context / 1000:,.1f}K "
            f"context, notes {self.decode_tokens_per_s(context):,.1f} tok/s "
            f"(measured here, {self.samples} samples)"
        )


def fit_speed(
    prefill: Sequence[PrefillSample], decode: Sequence[DecodeSample]
) -> SpeedModel | None:
    """Fit the speed model to measurements; None without a usable prefill sample.

    Without decode samples the decode speed is taken as the prefill's per-token cost
    times 4 (a generated token costs a full pass for one token), and said so by
    ``samples`` staying the prefill count.
    """
    rows = [
        (s.end - s.start, (s.end**2 - s.start**2) / 2, s.seconds)
        for s in prefill
        if s.end > s.start and s.seconds > 0
    ]
    if not rows:
        return None
    a, b = _fit_non_negative(rows)
    if a <= 0 and b <= 0:
        return None
    decode_rows = [
        (1.0, float(s.context), 1 / s.tokens_per_s)
        for s in decode
        if s.tokens_per_s > 0
    ]
    if decode_rows:
        c0, d = _fit_non_negative(decode_rows)
    else:
        c0, d = 4 * a, b
    return SpeedModel(a, b, c0, d, len(rows) + len(decode_rows))


def _fit_non_negative(
    rows: Sequence[tuple[float, float, float]],
) -> tuple[float, float]:
    """Least squares of ``y ≈ p·x1 + q·x2`` with p, q ≥ 0, each row weighted by 1/y.

    Weighting by 1/y fits relative errors, so one long measurement does not drown the
    short ones that pin down the per-token cost.
    """
    weighted = [(x1 / y, x2 / y, 1.0) for x1, x2, y in rows]
    s11 = sum(x1 * x1 for x1, _, _ in weighted)
    s22 = sum(x2 * x2 for _, x2, _ in weighted)
    s12 = sum(x1 * x2 for x1, x2, _ in weighted)
    s1y = sum(x1 for x1, _, _ in weighted)
    s2y = sum(x2 for _, x2, _ in weighted)
    determinant = s11 * s22 - s12 * s12
    if determinant > 1e-12 * max(s11 * s22, 1e-300):
        p = (s1y * s22 - s2y * s12) / determinant
        q = (s2y * s11 - s1y * s12) / determinant
        if p >= 0 and q >= 0:
            return p, q
    # On the boundary: one coefficient alone, whichever fits better.
    only_p = (s1y / s11, 0.0) if s11 > 0 else (0.0, 0.0)
    only_q = (0.0, s2y / s22) if s22 > 0 else (0.0, 0.0)

    def error(pq: tuple[float, float]) -> float:
        return sum((pq[0] * x1 + pq[1] * x2 - 1) ** 2 for x1, x2, _ in weighted)

    return min((only_p, only_q), key=error)


class SpeedRecord:
    """Measured speeds per model and KV precision, kept in one JSON file.

    Args:
        path: The file; `paths.speed_record_path` when None.
    """

    def __init__(self, path: Path | None = None):
        self._path = path
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The JSON file."""
        return self._path or paths.speed_record_path()

    @staticmethod
    def key(model_identity: str, kv_bits: int) -> str:
        """The record's key of a model at a KV precision."""
        return f"{model_identity}|kv{kv_bits}"

    def model(self, key: str) -> SpeedModel | None:
        """The fitted speed of ``key``, or None before anything was measured."""
        entry = self._load().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            return fit_speed(
                [PrefillSample(*map(float, row)) for row in entry.get("prefill", [])],
                [DecodeSample(*map(float, row)) for row in entry.get("decode", [])],
            )
        except (TypeError, ValueError) as exc:  # a hand-edited or foreign file
            log.warning(
                "ignoring unusable speeds for %s in %s: %s", key, self.path, exc
            )
            return None

    def add(
        self,
        key: str,
        prefill: Sequence[PrefillSample] = (),
        decode: Sequence[DecodeSample] = (),
    ) -> None:
        """Remember new measurements (the oldest beyond `MAX_SAMPLES` are forgotten).

        A file that cannot be written only costs the estimate its memory: logged.
        """
        with self._lock:
            data = self._load()
            entry = data.setdefault(key, {"prefill": [], "decode": []})
            entry["prefill"] = (
                entry.get("prefill", [])
                + [[s.start, s.end, round(s.seconds, 6)] for s in prefill]
            )[-MAX_SAMPLES:]
            entry["decode"] = (
                entry.get("decode", [])
                + [[s.context, round(s.tokens_per_s, 4)] for s in decode]
            )[-MAX_SAMPLES:]
            try:
                private_files.write_private_text(self.path, json.dumps(data))
            except OSError as exc:
                log.warning("measured speeds not saved to %s: %s", self.path, exc)

    def _load(self) -> dict:
        """The record as ``{key: {"prefill": [rows], "decode": [rows]}}``.

        Anything else in the file (a hand edit, another program's JSON) is dropped
        here, so the rest of the class sees only that shape.
        """
        try:
            data = bounded_read.read_json(
                self.path, what="The measured-speed file", max_bytes=MAX_FILE_BYTES
            )
        except FileNotFoundError:
            return {}
        except bounded_read.FileReadError as exc:
            log.warning("ignoring it: %s", exc)
            return {}
        if not isinstance(data, dict):
            log.warning("ignoring %s: it is not a JSON object", self.path)
            return {}
        return {
            key: {
                "prefill": _rows(entry.get("prefill"), 3),
                "decode": _rows(entry.get("decode"), 2),
            }
            for key, entry in data.items()
            if isinstance(entry, dict)
        }


def _rows(value: Any, width: int) -> list[list[float]]:
    """The rows of ``value`` that are ``width`` finite numbers; the rest dropped."""
    if not isinstance(value, list):
        return []
    return [
        list(row)
        for row in value
        if isinstance(row, list)
        and len(row) == width
        and all(bounded_read.finite_number(x) and x >= 0 for x in row)
    ]


def remember_step(record: SpeedRecord | None, key: str, final) -> None:
    """Add a finished step's prefill and decode speed to ``record`` (None: nothing).

    Args:
        record: The speed record.
        key: `SpeedRecord.key` of the model and precision.
        final: The step's final `GenerationEvent`.
    """
    if record is None or final.new_tokens <= 0 or final.prefill_s <= 0:
        return
    start = final.prompt_tokens - final.new_tokens
    decode = []
    if final.generated_tokens >= MIN_DECODE_SAMPLE_TOKENS and final.tokens_per_s > 0:
        decode.append(DecodeSample(final.prompt_tokens, final.tokens_per_s))
    record.add(
        key, [PrefillSample(start, final.prompt_tokens, final.prefill_s)], decode
    )
