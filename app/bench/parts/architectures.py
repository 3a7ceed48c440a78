"""One row per architecture: turn reuse, trim time, and KV bytes measured vs predicted.

Each architecture of `arch_configs.ARCHES` is built at the ``tiny`` shape (random
weights, real mlx-lm classes) in the scratch folder and loaded in its own engine:

* turn reuse: second-turn time to first token on the conversation's own cache ÷ the
  same turn on a fresh cache (interleaved pairs; the kept cache is rebuilt before
  each pair, untimed). Sliding-window and recurrent models resume from a state
  checkpoint; full-attention ones trim.
* trim: a conversation of two long exchanges is cut to the system prompt, a summary
  and the second exchange, the way the trimmer does it: a splice where every layer
  is full attention, else a rebuild from the nearest state checkpoint (the system
  prompt's). Reported in ms and as a ratio to a full re-prefill of the trimmed text.
* KV bytes: ``nbytes`` of the live cache after a prompt and one decoded token ÷
  ``kv_bytes_at`` from config.json, at 8-bit and 16-bit; plus the bytes of the
  state checkpoints kept.

The table's turn-reuse target is the same as the main model's; a tiny model's fixed
per-request cost weighs more, so it is reported, not tuned for.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from app.bench.context import SYSTEM_PROMPT, BenchContext, greedy, kv_settings
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import TARGETS
from app.bench.stats import pair_ratios, spread_text, summarize
from app.core.budget import kv_bytes_at, read_geometry
from app.core.budget.model_geometry import layer_summary
from app.core.text.synthetic_text import filler

NAME = "architectures"
TITLE = "Every architecture: turn reuse, trims, KV bytes"
REUSE_KEY = "arch_turn_reuse_vs_reprefill"
TRIM_KEY = "arch_trim_vs_reprefill"
BYTES_KEY = "arch_kv_bytes_measured_vs_predicted"
SHAPE = "tiny"
QUESTION = "Thanks. Which of those numbers was the largest, and why does it matter?"
FIRST_REPLY_TOKENS = 16
SUMMARY_TOKENS = 64
# Interleaved trim/re-prefill repetitions (a trim of a tiny model takes milliseconds).
TRIM_REPEATS = 3


def available(ctx: BenchContext) -> str | None:
    """Always available: the models are built here."""
    return None


def run(ctx: BenchContext) -> PartResult:
    """Build each architecture and measure it."""
    from app.core.modelkit.arch_configs import ARCHES

    s = ctx.settings
    context, pairs = s.arch_context_tokens, s.arch_pairs
    unknown = sorted(set(s.arch_names) - set(ARCHES))
    if unknown:
        raise ValueError(
            f"unknown architecture {unknown[0]!r}; choose from {', '.join(ARCHES)}"
        )
    names = [arch for arch in ARCHES if arch in s.arch_names] or list(ARCHES)
    root = Path(ctx.scratch or ctx.out_dir) / "architectures"
    result = PartResult()
    per_arch = {}
    for arch in names:
        ctx.log(f"  {arch} …")
        started = time.perf_counter()
        per_arch[arch] = _measure(ctx, root, arch, context, pairs)
        per_arch[arch]["elapsed_s"] = time.perf_counter() - started
    result.figures = {"shape": SHAPE, "context_tokens": context, "by_arch": per_arch}
    reuse_target = TARGETS["turn_reuse_vs_reprefill"]
    bytes_target = TARGETS["kv_bytes_measured_vs_predicted"]
    result.ratios[REUSE_KEY] = {
        a: f["reuse"]["ratio"]["median"] for a, f in per_arch.items()
    }
    result.ratios[TRIM_KEY] = {a: f["trim"]["ratio"] for a, f in per_arch.items()}
    result.ratios[BYTES_KEY] = {
        a: max(f["kv_bytes"].values(), key=lambda r: abs(r - 1.0))
        for a, f in per_arch.items()
    }
    result.ratio_stats[REUSE_KEY] = {
        a: f["reuse"]["ratio"] for a, f in per_arch.items()
    }
    bytes_held = {a: bytes_target.holds(r) for a, r in result.ratios[BYTES_KEY].items()}
    result.targets_met[BYTES_KEY] = all(bytes_held.values())
    for arch, found in per_arch.items():
        ratio = found["reuse"]["ratio"]
        result.rows.append(
            Row(
                f"{arch} ({found['layers']}): 2nd-turn TTFT kept ÷ re-prefill, "
                f"{found['reuse']['prompt_tokens']}-token prompt, 8-bit KV "
                f"(resumed by {found['reuse']['rewind']})",
                f"{ratio['median']:.3f}",
                spread_text(ratio, 3),
                reuse_target.text(),
                yes_no(reuse_target.holds(ratio["median"])),
            )
        )
        trim = found["trim"]
        result.rows.append(
            Row(
                f"{arch}: trim by {trim['method']} ({trim['held_before']} → "
                f"{trim['held_after']} tokens, {trim['computed']} computed), ms / "
                "÷ full re-prefill",
                f"{trim['ms']:.0f} ms / {trim['ratio']:.3f}",
                spread_text(trim["ratio_stats"], 3),
            )
        )
        kv = found["kv_bytes"]
        result.rows.append(
            Row(
                f"{arch}: KV bytes measured ÷ predicted at 16/8-bit "
                f"({found['kv_tokens']} tokens; checkpoints "
                f"{found['checkpoint_bytes'] / 2**20:.2f} MiB)",
                f"{kv['16']:.4f} / {kv['8']:.4f}",
                "—",
                bytes_target.text(),
                yes_no(bytes_held[arch]),
            )
        )
    result.notes.append(
        f"Models are the {SHAPE!r} shape of each architecture (random weights); "
        "sliding windows are 64 tokens, so every measured context has slid past them."
    )
    return result


def _measure(
    ctx: BenchContext, root: Path, arch: str, context: int, pairs: int
) -> dict:
    from app.bench.context import make_engine
    from app.core.modelkit.model_builder import build_model

    folder = root / arch
    if not (folder / "config.json").is_file():
        build_model(folder, shape=SHAPE, bits=16, seed=0, arch=arch)
    engine = make_engine(root / f"{arch}-scratch")
    try:
        engine.load(folder)
        geometry = read_geometry(folder)
        found: dict[str, Any] = {"layers": layer_summary(geometry)}
        found["reuse"] = _reuse(engine, context, pairs)
        found["trim"] = _trim(engine, context, max(pairs, TRIM_REPEATS))
        found.update(_kv_bytes(engine, geometry, context))
        return found
    finally:
        engine.shutdown()


def _first_turn(engine, context: int) -> list[dict]:
    text = filler(max(context - 64 - FIRST_REPLY_TOKENS, 16), engine.count_tokens, 3)
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": text},
    ]


def _reuse(engine, context: int, pairs: int) -> dict:
    kv = kv_settings(8)
    first = _first_turn(engine, context)
    kept, fresh, reused = [], [], []
    prompt_tokens, rewind = 0, "none"
    for _ in range(pairs):
        engine.drop_cache("kept")
        reply = engine.chat("kept", first, kv, greedy(FIRST_REPLY_TOKENS)).text()
        second = [
            *first,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": QUESTION},
        ]
        final = engine.chat("kept", second, kv, greedy(2)).wait()
        kept.append(final.ttft_s)
        reused.append(final.reused_tokens)
        prompt_tokens, rewind = final.prompt_tokens, final.rewind
        engine.drop_cache("fresh")
        fresh.append(engine.chat("fresh", second, kv, greedy(2)).wait().ttft_s)
        engine.drop_cache("fresh")
    engine.drop_cache("kept")
    return {
        "prompt_tokens": prompt_tokens,
        "reused_tokens": reused,
        "rewind": rewind,
        "kept_ttft_s": summarize(kept),
        "reprefill_ttft_s": summarize(fresh),
        "ratio": summarize(pair_ratios(kept, fresh)),
    }


def _trim(engine, context: int, repeats: int) -> dict:
    from app.core.engine.cache.conversation_cache import SpliceUnsupported

    kv = kv_settings(8)
    half = max(context // 2 - 64, 32)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": filler(half, engine.count_tokens, 5)},
        {"role": "assistant", "content": filler(32, engine.count_tokens, 6)},
        {"role": "user", "content": filler(half, engine.count_tokens, 7)},
        {"role": "assistant", "content": filler(32, engine.count_tokens, 8)},
    ]
    summary = {
        "role": "user",
        "content": "Summary: " + filler(SUMMARY_TOKENS, engine.count_tokens, 9),
    }
    trimmed = [messages[0], summary, *messages[3:]]
    all_ids = engine.render(messages, add_generation_prompt=False)
    new_ids = engine.render(trimmed, add_generation_prompt=False)
    keep = len(engine.render(messages[:1], add_generation_prompt=False))
    drop_until = len(engine.render(messages[:3], add_generation_prompt=False))
    head = engine.render(trimmed[:2], add_generation_prompt=False)
    trims, reprefills = [], []
    for _ in range(repeats):
        engine.drop_cache("trim")
        # Fill as a chat does: the system prompt is a boundary with a state checkpoint.
        engine.prefill("trim", all_ids[:keep], kv)
        engine.prefill("trim", all_ids, kv)
        held_before = engine.cache_state("trim").tokens
        try:
            report = engine.splice("trim", keep, drop_until, head[keep:])
            method = "splice"
        except SpliceUnsupported:
            report = engine.prefill("trim", new_ids, kv, exact=True)
            method = "rebuild from checkpoint" if report.reused_tokens else "rebuild"
        trims.append(report.seconds)
        engine.drop_cache("reprefill")
        reprefills.append(engine.prefill("reprefill", new_ids, kv).seconds)
        engine.drop_cache("reprefill")
        engine.drop_cache("trim")
    ratio = summarize(pair_ratios(trims, reprefills))
    return {
        "method": method,
        "held_before": held_before,
        "held_after": report.context_tokens,
        "reused": report.reused_tokens,
        "computed": report.computed_tokens,
        "ms": summarize(trims)["median"] * 1000,
        "reprefill_ms": summarize(reprefills)["median"] * 1000,
        "ratio": ratio["median"],
        "ratio_stats": ratio,
    }


def _kv_bytes(engine, geometry, context: int) -> dict:
    ids = engine.render(_first_turn(engine, context))
    ratios, checkpoint = {}, 0
    for bits in (16, 8):
        engine.drop_cache("bytes")
        final = engine.generate("bytes", ids, kv_settings(bits), greedy(1)).wait()
        info = engine.model_info
        predicted = kv_bytes_at(
            geometry,
            final.context_tokens,
            bits,
            64,
            act_dtype_bytes=4 if info.kv_dtype == "float32" else 2,
            state_dtype_bytes=4 if info.activation_dtype == "float32" else 2,
        )
        ratios[str(bits)] = final.kv_bytes / predicted
        checkpoint = final.checkpoint_bytes
        engine.drop_cache("bytes")
    return {"kv_bytes": ratios, "kv_tokens": len(ids), "checkpoint_bytes": checkpoint}
