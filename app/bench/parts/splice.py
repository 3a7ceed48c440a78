"""Trim by splice vs by rebuild: time, and how much the next tokens' distributions differ.

A conversation of system prompt + dropped history + about 2K tokens of kept history is
trimmed the way `chat.trimmer.Trimmer.fix_cache` does it: the dropped span is replaced
by an extractive summary, either by splicing the cache (`ConversationCache.splice`: only
the summary is computed, the kept entries stay) or by rebuilding it (`prefill_only` of
the trimmed context after the shared prefix, as `Engine.prefill` does). Each pair starts
from a deep copy of the same untrimmed cache, so the same work is timed every time; the
copy itself is not timed. These are the calls `Engine.splice` and `Engine.prefill` time.

Quality: the rebuilt cache is exact; the spliced one keeps entries computed while the
dropped history was visible. A next user turn is fed to both, then the 64 greedy tokens
of the rebuilt path are teacher-forced through both; per step the top-1 tokens are
compared and KL(rebuild ‖ splice) is computed from the full distributions. The untrimmed
cache goes through the same steps as a reference for how far a different context moves
the distribution. Everything that touches MLX runs in one job on the engine thread.
"""

from __future__ import annotations

import math
import time

from app.bench.context import SYSTEM_PROMPT, BenchContext, kv_settings
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import TARGETS
from app.bench.stats import pair_ratios, spread_text, summarize
from app.core.chat.model_messages import build_messages, summary_style
from app.core.presets.presets import get_preset
from app.core.token_ids import common_prefix_length
from app.core.trim.extractive import extractive_summary

NAME = "splice"
TITLE = "Trim: splice vs rebuild"
RATIO_KEY = "splice_vs_rebuild"
MESSAGE_TOKENS = 128
# Unquantized: on this CPU an fp32 cache prefills 3-4x faster than an 8-bit one, so the
# rebuild is as fast as it gets and the ratio is the least flattering; nor does
# quantization noise blur the KL comparison.
KV_BITS_USED = 16
NEXT_QUESTION = "Going back to the start: what did we decide, in one sentence?"


def available(ctx: BenchContext) -> str | None:
    """Always available."""
    return None


def _history(ctx: BenchContext, tokens: int, seed: int) -> list[tuple[str, str]]:
    """Whole user/assistant pairs of at least ``tokens`` rendered tokens in all."""
    overhead = _message_overhead(ctx)
    messages: list[tuple[str, str]] = []
    total, index = 0, 0
    while total < tokens or len(messages) % 2:
        role = "user" if index % 2 == 0 else "assistant"
        text = ctx.filler(MESSAGE_TOKENS, seed=seed * 1000 + index)
        messages.append((role, text))
        total += ctx.engine.count_tokens(text) + overhead
        index += 1
    return messages


def _message_overhead(ctx: BenchContext) -> int:
    """Template tokens around one message's text."""
    engine = ctx.engine
    one = engine.render([{"role": "user", "content": "x"}], False)
    two = engine.render(
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": "x"}], False
    )
    return len(two) - len(one) - engine.count_tokens("x")


def _scenario(ctx: BenchContext) -> dict:
    """Token ids of the untrimmed and trimmed conversation, as the Trimmer computes them."""
    s = ctx.settings
    engine = ctx.engine
    preset = get_preset("chat")
    kv = kv_settings(KV_BITS_USED)
    style = summary_style(engine.render)
    dropped = _history(ctx, s.splice_dropped_tokens, seed=11)
    kept = _history(ctx, s.splice_kept_tokens, seed=12)
    summary = extractive_summary(
        dropped, preset.summary_max_tokens, engine.count_tokens
    )
    old_messages = build_messages(SYSTEM_PROMPT, [], dropped + kept, style=style)
    new_messages = build_messages(SYSTEM_PROMPT, [summary], kept, style=style)
    head_count = len(new_messages) - len(kept)
    old_ids = engine.render(old_messages, False)
    old_head = engine.render(old_messages[: len(old_messages) - len(kept)], False)
    head_ids = engine.render(new_messages[:head_count], False)
    new_ids = engine.render(new_messages, False)
    drop_until = len(old_head)
    keep = min(common_prefix_length(old_ids, head_ids), drop_until)
    asked = [*new_messages, {"role": "user", "content": NEXT_QUESTION}]
    probe = engine.render(asked, True)
    if probe[: len(new_ids)] != new_ids or old_ids[:drop_until] != old_head:
        raise RuntimeError("the chat template does not render messages additively")
    return {
        "old_ids": old_ids,
        "new_ids": new_ids,
        "keep": keep,
        "drop_until": drop_until,
        "insert_ids": head_ids[keep:],
        "probe_ids": probe[len(new_ids) :],
        "kept_tokens": len(old_ids) - drop_until,
        "dropped_tokens": drop_until - keep,
        "summary_tokens": len(head_ids) - keep,
        "kv": kv,
    }


def _measure(loaded, sc: dict, pairs: int, kl_steps: int) -> dict:
    """Time splice/rebuild pairs and compare next-token distributions (engine thread)."""
    import mlx.core as mx

    from app.core.engine.cache.conversation_cache import ConversationCache
    from app.core.engine.generation import prefill_only

    kv = sc["kv"]
    started = time.perf_counter()
    master = ConversationCache(loaded.model, kv)
    prefill_only(loaded, master, sc["old_ids"], kv)
    setup_s = time.perf_counter() - started

    splice_s, rebuild_s = [], []
    spliced = rebuilt = None
    for _ in range(pairs):
        spliced = master.clone()
        spliced.evaluate()
        started = time.perf_counter()
        spliced.splice(sc["keep"], sc["drop_until"], sc["insert_ids"])
        splice_s.append(time.perf_counter() - started)
        rebuilt = master.clone()
        rebuilt.evaluate()
        started = time.perf_counter()
        prefill_only(loaded, rebuilt, sc["new_ids"], kv)
        rebuild_s.append(time.perf_counter() - started)
    assert spliced is not None and rebuilt is not None, "pairs is at least 1"
    ids_match = spliced.token_ids == rebuilt.token_ids == sc["new_ids"]
    untrimmed = master.clone()
    del master

    def log_probs(cache, ids):
        logits = loaded.model(mx.array(ids)[None], cache=cache.layers)[0, -1]
        logits = logits.astype(mx.float32)
        return logits - mx.logsumexp(logits)

    def kl(p_log, q_log):
        return mx.sum(mx.exp(p_log) * (p_log - q_log))

    ref = log_probs(rebuilt, sc["probe_ids"])
    spl = log_probs(spliced, sc["probe_ids"])
    unt = log_probs(untrimmed, sc["probe_ids"])
    kl_splice, kl_untrimmed, top1_splice, top1_untrimmed = [], [], [], []
    kl_untrimmed_splice = []
    entropy, max_prob = [], []
    for _ in range(kl_steps):
        token = int(mx.argmax(ref))
        kl_splice.append(kl(ref, spl).item())
        kl_untrimmed.append(kl(ref, unt).item())
        kl_untrimmed_splice.append(kl(unt, spl).item())
        top1_splice.append(int(mx.argmax(spl)) == token)
        top1_untrimmed.append(int(mx.argmax(unt)) == token)
        entropy.append(-mx.sum(mx.exp(ref) * ref).item())
        max_prob.append(mx.exp(mx.max(ref)).item())
        ref = log_probs(rebuilt, [token])
        spl = log_probs(spliced, [token])
        unt = log_probs(untrimmed, [token])
    return {
        "setup_prefill_s": setup_s,
        "splice_s": splice_s,
        "rebuild_s": rebuild_s,
        "ids_match": ids_match,
        "kl_splice": kl_splice,
        "kl_untrimmed": kl_untrimmed,
        "kl_untrimmed_vs_splice": kl_untrimmed_splice,
        "top1_splice": top1_splice,
        "top1_untrimmed": top1_untrimmed,
        "entropy": entropy,
        "max_prob": max_prob,
    }


def _vocab_size(ctx: BenchContext) -> int | None:
    from app.core.budget.model_config import load_config

    value = load_config(ctx.model_dir).get("vocab_size")
    return int(value) if value else None


def run(ctx: BenchContext) -> PartResult:
    """Time splice vs rebuild and compare their next-token distributions."""
    s = ctx.settings
    sc = _scenario(ctx)
    loaded = ctx.loaded_model()
    m = ctx.engine.submit(
        _measure, loaded, sc, s.splice_pairs, s.splice_kl_steps
    ).result()
    ratios = summarize(pair_ratios(m["splice_s"], m["rebuild_s"]))
    target = TARGETS[RATIO_KEY]
    met = target.holds(ratios["median"])
    steps = len(m["kl_splice"])
    agree = sum(m["top1_splice"]) / steps
    agree_ref = sum(m["top1_untrimmed"]) / steps
    kl_s, kl_u = summarize(m["kl_splice"]), summarize(m["kl_untrimmed"])
    result = PartResult()
    result.figures = {
        "kv_bits": sc["kv"].bits,
        "kept_tokens": sc["kept_tokens"],
        "dropped_tokens": sc["dropped_tokens"],
        "summary_tokens": sc["summary_tokens"],
        "system_tokens_kept": sc["keep"],
        "context_after_trim": len(sc["new_ids"]),
        "untrimmed_context": len(sc["old_ids"]),
        "setup_prefill_s": m["setup_prefill_s"],
        "splice_s": summarize(m["splice_s"]),
        "rebuild_s": summarize(m["rebuild_s"]),
        "ratio": ratios,
        "token_ids_match": m["ids_match"],
        "steps": steps,
        "top1_agreement_splice": agree,
        "top1_agreement_untrimmed_reference": agree_ref,
        "kl_splice": kl_s,
        "kl_untrimmed_reference": kl_u,
        "kl_untrimmed_to_splice": summarize(m["kl_untrimmed_vs_splice"]),
        "rebuild_entropy_nats": summarize(m["entropy"]),
        "rebuild_max_prob": summarize(m["max_prob"]),
    }
    result.ratios[RATIO_KEY] = ratios["median"]
    result.ratio_stats[RATIO_KEY] = ratios
    result.targets_met[RATIO_KEY] = met
    result.ratios["splice_top1_agreement"] = agree
    result.ratios["splice_kl_mean"] = sum(m["kl_splice"]) / steps
    kv_bits = sc["kv"].bits
    result.rows = [
        Row(
            f"Trim time splice ÷ rebuild, {sc['kept_tokens']} kept tokens "
            f"({kv_bits}-bit KV, {sc['summary_tokens']}-token summary)",
            f"{ratios['median']:.3f}",
            spread_text(ratios, 3),
            target.text(),
            yes_no(met),
        ),
        Row(
            "Trim time splice / rebuild (absolute)",
            f"{summarize(m['splice_s'])['median'] * 1000:.0f} ms / "
            f"{summarize(m['rebuild_s'])['median'] * 1000:.0f} ms",
        ),
        Row(
            f"After splice vs after rebuild, {steps} greedy steps: top-1 agreement, "
            "KL mean (max)",
            f"{agree:.0%}, {result.ratios['splice_kl_mean']:.2e} nats "
            f"({kl_s['max']:.2e})",
        ),
        Row(
            "Reference: untrimmed cache vs rebuild, same steps: top-1, KL mean",
            f"{agree_ref:.0%}, {sum(m['kl_untrimmed']) / steps:.2e} nats",
        ),
        Row(
            "Reference: KL(untrimmed ‖ splice), same steps, mean",
            f"{sum(m['kl_untrimmed_vs_splice']) / steps:.2e} nats",
        ),
    ]
    vocab = _vocab_size(ctx)
    flat = f" of at most {math.log(vocab):.2f}" if vocab else ""
    kl_splice_mean = result.ratios["splice_kl_mean"]
    kl_to_untrimmed = sum(m["kl_untrimmed_vs_splice"]) / steps
    result.notes.append(
        "The model has random weights: its next-token distributions are nearly flat "
        f"(mean entropy {summarize(m['entropy'])['median']:.2f} nats{flat}), so the "
        "greedy top-1 token hangs on tiny logit differences and KL values are small in "
        "absolute terms; read them against the references. Here the spliced cache is "
        f"{kl_splice_mean / max(kl_to_untrimmed, 1e-12):.0f}x closer (in KL) to the "
        "untrimmed cache than to the rebuilt one: its kept entries were computed with "
        "the dropped history visible and still carry it (a splice is not a rebuild)."
    )
    if not m["ids_match"]:
        result.notes.append("Spliced and rebuilt caches hold different token ids.")
    return result
