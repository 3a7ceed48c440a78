"""Measure a model's prefill and decode speed on this machine in a few seconds.

The first plan with a model has nothing measured to estimate from, so it reads the
start of the document itself on a scratch cache: two prefill spans at two context
lengths (which separate the per-token cost from the attention's growth) and a few
decoded tokens. What it measures goes into the `SpeedRecord` like every later step's
measurements. Uses the engine's API only; the scratch cache is dropped afterwards.
"""

from __future__ import annotations

from app.core.cancel import CancelToken
from app.core.longdoc.plan.speed import DecodeSample, PrefillSample
from app.core.presets.generation_settings import KVSettings, SamplingSettings

PROBE_KEY = "longdoc-speed-probe"
PROBE_CONTEXTS = (256, 768)
"""Context lengths reached by the probe's prefill spans."""
PROBE_DECODE_TOKENS = 6
MIN_PROBE_TOKENS = 16


def probe_speed(
    engine, kv: KVSettings, ids: list[int], cancel: CancelToken | None = None
) -> tuple[list[PrefillSample], list[DecodeSample]]:
    """Prefill ``ids`` in spans and decode a few tokens; return what was measured.

    Args:
        engine: A loaded engine.
        kv: The KV precision of the reading (quantized caches run at another speed).
        ids: Tokens to read: the start of the document's first prompt.
        cancel: Stops the probe between its spans.

    Returns:
        Prefill samples (one per span) and at most one decode sample; both empty when
        ``ids`` is too short to measure anything.
    """
    cancel = cancel or CancelToken()
    prefill: list[PrefillSample] = []
    decode: list[DecodeSample] = []
    if len(ids) < MIN_PROBE_TOKENS:
        return prefill, decode
    start = 0
    try:
        for context in PROBE_CONTEXTS:
            end = min(context, len(ids) - 1)
            if end <= start or cancel.cancelled:
                break
            report = engine.prefill(PROBE_KEY, ids[:end], kv, cancel=cancel)
            if report.computed_tokens < end - start:  # cancelled in between
                break
            prefill.append(PrefillSample(start, end, report.seconds))
            start = end
        if start and not cancel.cancelled:
            sampling = SamplingSettings(
                temperature=0.0, top_p=1.0, max_tokens=PROBE_DECODE_TOKENS, seed=0
            )
            handle = engine.side_generate(
                PROBE_KEY, ids[: start + 1], kv, sampling, cancel=cancel
            )
            for _ in handle:
                pass
            final = handle.final
            if final is not None and final.generated_tokens >= 3:
                decode.append(DecodeSample(final.context_tokens, final.tokens_per_s))
    finally:
        engine.drop_cache(PROBE_KEY)
    return prefill, decode
