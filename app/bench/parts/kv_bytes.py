"""KV bytes per token: the live cache's ``nbytes`` ÷ the budget calculator's prediction.

The prediction comes from config.json alone (`budget.kv_budget.kv_bytes_at`, with the
activation width the engine really uses: 4 bytes on the CPU backend, where it upcasts),
rounded to mlx-lm's 256-token allocation step. Measured at 16, 8 and 4 bits, on a fresh
cache filled to a multiple of 256 tokens and to a length that is not (the target cases),
and on caches that grew the way a chat grows them (prompt, reply, next prompt; reported,
not part of the target): after a trim those can hold more or less than the prediction.
"""

from __future__ import annotations

from app.bench.context import BenchContext, greedy, kv_settings
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import KV_BITS, TARGETS
from app.bench.stats import spread_text, summarize
from app.core.budget import bytes_per_token, kv_bytes_at, read_geometry

NAME = "kv_bytes"
TITLE = "KV bytes measured vs predicted"
RATIO_KEY = "kv_bytes_measured_vs_predicted"
GROWTH_KEY = "kv_bytes_after_turn_vs_predicted"
GROUP = 64
_ACT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def available(ctx: BenchContext) -> str | None:
    """Always available."""
    return None


def run(ctx: BenchContext) -> PartResult:
    """Fill caches at each precision and compare their bytes with the prediction."""
    s = ctx.settings
    engine = ctx.engine
    geometry = read_geometry(ctx.model_dir)
    info = engine.model_info
    assert info is not None, "the bench runs on a loaded engine"
    act = _ACT_BYTES.get(info.kv_dtype, 4)
    counts = sorted(s.kv_token_counts)
    aligned = next((c for c in counts if c % 256 == 0), 1024)
    grown = s.kv_growth_tokens
    ids = ctx.prompt_ids(max(counts[-1], aligned + 512, grown + 256), seed=2)
    key = "bench-kv-bytes"
    cases, growth = [], []
    for bits in KV_BITS:
        kv = kv_settings(bits)
        for tokens in counts:
            engine.drop_cache(key)
            report = engine.prefill(key, ids[:tokens], kv)
            cases.append(_case(geometry, act, bits, "fresh prefill", report, tokens))
        # What a chat does: a prompt, a short reply, then the next prompt on top (the
        # reply kept), or a next prompt that shares only the first prompt, so the reply
        # is trimmed off, here back to a multiple of 256.
        for how, first, extra, keep_reply in (
            ("prompt, reply, next prompt", grown, 200, True),
            (
                "prompt, reply trimmed to a multiple of 256, next prompt",
                aligned,
                512,
                False,
            ),
        ):
            engine.drop_cache(key)
            engine.generate(key, ids[:first], kv, greedy(16)).wait()
            held = engine.cached_token_ids(key) if keep_reply else ids[:first]
            following = held + ids[first : first + extra]
            report = engine.prefill(key, following, kv)
            growth.append(_case(geometry, act, bits, how, report, len(following)))
        engine.drop_cache(key)
    result = PartResult()
    result.figures = {
        "act_dtype_bytes": act,
        "group_size": GROUP,
        "cases": cases,
        "after_turn_cases": growth,
    }
    target = TARGETS[RATIO_KEY]
    result.ratios[RATIO_KEY] = {}
    result.ratio_stats[RATIO_KEY] = {}
    result.ratios[GROWTH_KEY] = {}
    held_all = {}
    for bits in KV_BITS:
        ratios = [c["ratio"] for c in cases if c["bits"] == bits]
        summary = summarize(ratios)
        met = all(target.holds(r) for r in ratios)
        held_all[str(bits)] = met
        result.ratios[RATIO_KEY][str(bits)] = summary["median"]
        result.ratio_stats[RATIO_KEY][str(bits)] = summary
        after = [c for c in growth if c["bits"] == bits]
        result.ratios[GROWTH_KEY][str(bits)] = max(c["ratio"] for c in after)
        per_token = next(c for c in cases if c["bits"] == bits)["predicted_per_token"]
        result.rows.append(
            Row(
                f"KV bytes measured ÷ predicted, {bits}-bit "
                f"({' and '.join(map(str, counts))} tokens; {per_token:g} B/token)",
                f"{summary['median']:.4f}",
                spread_text(summary, 4),
                target.text(),
                yes_no(met),
            )
        )
        result.rows.append(
            Row(
                f"Same after a chat turn, {bits}-bit: reply kept "
                f"({after[0]['tokens']} tok) / reply trimmed to a 256 multiple "
                f"({after[1]['tokens']} tok)",
                f"{after[0]['ratio']:.4f} / {after[1]['ratio']:.4f}",
            )
        )
    result.targets_met[RATIO_KEY] = all(held_all.values())
    result.figures["target_held_by_bits"] = held_all
    over = [c for c in growth if c["ratio"] > target.value + target.tolerance]
    if over:
        worst = max(over, key=lambda c: c["ratio"])
        result.notes.append(
            "A cache that grew over a chat turn can hold more than the rounded "
            f"prediction: {worst['ratio']:.3f}× at {worst['bits']}-bit "
            f"({worst['how']}, {worst['tokens']} tokens). When a trim leaves the "
            "cache at a multiple of 256 with spare capacity behind it, mlx-lm appends "
            "the next chunk after the spare capacity instead of into it. The memory "
            "budget's safety factor has to cover this."
        )
    under = [c for c in growth if c["ratio"] < target.value - target.tolerance]
    if under:
        result.notes.append(
            "After a turn that kept the reply, the cache can also hold less than the "
            "rounded prediction (its allocation no longer ends on a multiple of 256): "
            "the prediction errs on the safe side there."
        )
    return result


def _case(geometry, act: int, bits: int, how: str, report, tokens: int) -> dict:
    predicted = kv_bytes_at(
        geometry, tokens, bits, GROUP, allocation_rounding=True, act_dtype_bytes=act
    )
    return {
        "bits": bits,
        "how": how,
        "tokens": tokens,
        "held_tokens": report.context_tokens,
        "measured_bytes": report.kv_bytes,
        "predicted_bytes": predicted,
        "predicted_unrounded_bytes": kv_bytes_at(
            geometry,
            tokens,
            bits,
            GROUP,
            allocation_rounding=False,
            act_dtype_bytes=act,
        ),
        "predicted_per_token": bytes_per_token(geometry, bits, GROUP, act),
        "ratio": report.kv_bytes / predicted,
        "prefill_s": report.seconds,
    }
