"""Decode speed against context length at 16-, 8- and 4-bit KV.

At each context length, one cache per precision holds the same prompt, then the
precisions decode interleaved: 16, 8, 4, 16, 8, 4, … Each run reuses all but the last
prompt token and generates a fixed number of greedy tokens; the speed is the engine's
own `GenerationEvent.tokens_per_s`, as the app shows it.

Filling the caches: the 16-bit one grows from one context length to the next. The 8-
and 4-bit ones are filled unquantized and quantized after the last prefill chunk
(``quantized_kv_start`` = context − 1): an 8-bit prefill is 3-4x slower on this CPU, and
how the entries got into the cache does not change the speed of decoding from it.
"""

from __future__ import annotations

from app.bench.context import BenchContext, greedy
from app.bench.results import PartResult, Row
from app.bench.settings import KV_BITS
from app.bench.stats import summarize
from app.core.generation_settings import KVSettings

NAME = "context_speed"
TITLE = "Decode speed vs context length"


def available(ctx: BenchContext) -> str | None:
    """Always available."""
    return None


def run(ctx: BenchContext) -> PartResult:
    """Measure decode tok/s at each context length and KV precision."""
    s = ctx.settings
    engine = ctx.engine
    contexts = sorted(s.speed_contexts)
    ids = ctx.prompt_ids(contexts[-1], seed=4)
    keys = {bits: f"bench-speed-{bits}" for bits in KV_BITS}
    for key in keys.values():
        engine.drop_cache(key)
    table: dict[str, dict[str, dict]] = {str(b): {} for b in KV_BITS}
    try:
        for context in contexts:
            settings = {bits: _kv(bits, context) for bits in KV_BITS}
            prefill = {}
            for bits in KV_BITS:
                if bits != 16:
                    engine.drop_cache(keys[bits])
                prefill[bits] = engine.prefill(
                    keys[bits], ids[:context], settings[bits]
                )
            samples: dict[int, list] = {bits: [] for bits in KV_BITS}
            ttft: dict[int, list] = {bits: [] for bits in KV_BITS}
            for _ in range(s.speed_reps):
                for bits in KV_BITS:
                    final = engine.generate(
                        keys[bits],
                        ids[:context],
                        settings[bits],
                        greedy(s.speed_decode_tokens),
                    ).wait()
                    samples[bits].append(final.tokens_per_s)
                    ttft[bits].append(final.ttft_s)
                    if final.kv_bits != bits:
                        raise RuntimeError(
                            f"the {bits}-bit run decoded from a {final.kv_bits}-bit cache"
                        )
            for bits in KV_BITS:
                report = prefill[bits]
                table[str(bits)][str(context)] = {
                    "decode_tps": summarize(samples[bits]),
                    "ttft_s": summarize(ttft[bits]),
                    "prefill_s": report.seconds,
                    "prefilled_tokens": report.computed_tokens,
                    "kv_bytes": report.kv_bytes,
                }
            ctx.log(
                f"  {context} tokens: "
                + ", ".join(
                    f"{b}-bit {table[str(b)][str(context)]['decode_tps']['median']:.1f}"
                    for b in KV_BITS
                )
                + " tok/s"
            )
    finally:
        for key in keys.values():
            engine.drop_cache(key)
    result = PartResult()
    result.figures = {
        "contexts": contexts,
        "decode_tokens": s.speed_decode_tokens,
        "by_bits": table,
    }
    for bits in KV_BITS:
        cells = [table[str(bits)][str(c)]["decode_tps"] for c in contexts]
        result.rows.append(
            Row(
                f"Decode tok/s at {' / '.join(_k(c) for c in contexts)} context, "
                f"{bits}-bit KV",
                " / ".join(f"{c['median']:.1f}" for c in cells),
                " / ".join(f"{c['min']:.0f}–{c['max']:.0f}" for c in cells)
                + f" (n={cells[0]['n']})",
            )
        )
    longest = str(contexts[-1])
    base = table["16"][longest]["decode_tps"]["median"]
    result.ratios["decode_tps_vs_16bit_at_longest_context"] = {
        str(b): table[str(b)][longest]["decode_tps"]["median"] / base for b in KV_BITS
    }
    return result


def _kv(bits: int, context: int) -> KVSettings:
    if bits == 16:
        return KVSettings(bits=16)
    return KVSettings(bits=bits, group_size=64, quantized_kv_start=context - 1)


def _k(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)
