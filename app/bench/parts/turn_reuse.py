"""Turn reuse: second-turn time to first token with the kept cache ÷ a full re-prefill.

Turn 1 is a long user message; turn 2 sends the whole chat again with a short question.
"Kept" runs turn 2 on the conversation's own cache, which already holds turn 1 (only the
reply's re-rendered tail and the question are prefilled); "re-prefill" runs the same
turn 2 on a fresh cache key. Before every kept run the cache is put back to its state
after turn 1 (a cheap trim through `Engine.prefill`), so each pair measures the same
thing. Times are `GenerationEvent.ttft_s` (request to first token, engine thread hop
included). The KV cache is unquantized (see `KV_BITS_USED`).
"""

from __future__ import annotations

from app.bench.context import SYSTEM_PROMPT, BenchContext, greedy, kv_settings
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import TARGETS
from app.bench.stats import pair_ratios, spread_text, summarize

NAME = "turn_reuse"
TITLE = "Second turn: kept cache vs re-prefill"
RATIO_KEY = "turn_reuse_vs_reprefill"
FIRST_REPLY_TOKENS = 32
# Unquantized: the fastest re-prefill on this CPU (3-4x faster than 8-bit), so the
# ratio is the least flattering one.
KV_BITS_USED = 16
QUESTION = "Thanks. Which of those numbers was the largest, and why does it matter?"


def available(ctx: BenchContext) -> str | None:
    """Always available."""
    return None


def _first_turn(ctx: BenchContext, context_tokens: int) -> list[dict]:
    """Return turn-1 messages sized so that turn 2 is about ``context_tokens``."""
    engine = ctx.engine
    base = engine.render(
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
            {"role": "user", "content": QUESTION},
        ]
    )
    # The reply adds about FIRST_REPLY_TOKENS; the rest of the context is the message.
    text = ctx.filler(max(context_tokens - len(base) - FIRST_REPLY_TOKENS, 16), seed=3)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": text},
    ]


def run(ctx: BenchContext) -> PartResult:
    """Measure interleaved kept/re-prefill pairs at each context length."""
    s = ctx.settings
    engine = ctx.engine
    kv = kv_settings(KV_BITS_USED)
    result = PartResult()
    per_context, stats = {}, {}
    rows = []
    for context in s.reuse_contexts:
        first = _first_turn(ctx, context)
        kept_key, fresh_key = f"bench-reuse-{context}", f"bench-reuse-fresh-{context}"
        engine.drop_cache(kept_key)
        turn1 = engine.chat(kept_key, first, kv, greedy(FIRST_REPLY_TOKENS))
        reply = turn1.text()
        after_turn1 = engine.cached_token_ids(kept_key)
        second = [
            *first,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": QUESTION},
        ]
        kept, fresh, reused, prompt_tokens = [], [], [], 0
        for _ in range(s.reuse_pairs):
            engine.prefill(kept_key, after_turn1, kv)  # back to the state after turn 1
            final = engine.chat(kept_key, second, kv, greedy(2)).wait()
            kept.append(final.ttft_s)
            reused.append(final.reused_tokens)
            prompt_tokens = final.prompt_tokens
            engine.drop_cache(fresh_key)
            final = engine.chat(fresh_key, second, kv, greedy(2)).wait()
            fresh.append(final.ttft_s)
            engine.drop_cache(fresh_key)
        engine.drop_cache(kept_key)
        ratios = summarize(pair_ratios(kept, fresh))
        label = str(context)
        stats[label] = ratios
        per_context[label] = {
            "prompt_tokens": prompt_tokens,
            "reused_tokens": reused,
            "kept_ttft_s": summarize(kept),
            "reprefill_ttft_s": summarize(fresh),
            "ratio": ratios,
        }
        met = TARGETS[RATIO_KEY].holds(ratios["median"])
        rows.append(
            Row(
                f"2nd-turn TTFT kept cache ÷ re-prefill, {prompt_tokens}-token prompt "
                f"({kv.bits}-bit KV)",
                f"{ratios['median']:.3f}",
                spread_text(ratios, 3),
                TARGETS[RATIO_KEY].text(),
                yes_no(met),
            )
        )
        rows.append(
            Row(
                f"2nd-turn TTFT kept / re-prefill, {prompt_tokens} tokens (absolute)",
                f"{summarize(kept)['median']:.3f} s / "
                f"{summarize(fresh)['median']:.3f} s",
            )
        )
    worst = max(s["median"] for s in stats.values())
    result.figures = {"kv_bits": kv.bits, "contexts": per_context}
    result.ratios[RATIO_KEY] = worst
    result.ratios[f"{RATIO_KEY}_by_context"] = {
        k: v["median"] for k, v in stats.items()
    }
    result.ratio_stats[RATIO_KEY] = stats
    result.targets_met[RATIO_KEY] = all(
        TARGETS[RATIO_KEY].holds(v["median"]) for v in stats.values()
    )
    result.rows = rows
    result.notes.append(
        f"`{RATIO_KEY}` in `ratios` is the largest (worst) of the per-context medians."
    )
    return result
