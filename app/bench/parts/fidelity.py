"""Fidelity: what each way of saving KV memory costs in answers, on the reference model.

Random-weight models cannot lose quality, so this part loads the trained reference
model (docs/reference-model.md) on an engine of its own, whatever ``--model`` the run
uses, and runs the quality check's cells on it: perplexity, top-1 agreement, KL and
pass-key recall at 16/8/4-bit KV × groups 32/64/128; recall of a fact in the kept turns
after a splice, a rebuild and no trim; and recall of a fact in the *dropped* turns,
which only the summary can carry, with an extractive and a model-written summary.
Every row has its KV bytes, so memory and quality sit side by side
(``recall_vs_kv_bytes.png``).
"""

from __future__ import annotations

import time
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.results import NotAvailable, PartResult, Row
from app.core.quality.cells import KV
from app.core.quality.probes import ProbeSizes

NAME = "fidelity"
TITLE = "Fidelity on the reference model: quality vs KV bytes"
# Context length at which KV bytes are compared (the probes' longest pass key fits).
BYTES_AT_TOKENS = 4096
FULL_SIZES = ProbeSizes(
    name="bench",
    text_tokens=768,
    pass_key_distances=(256, 1024),
    pass_keys_per_distance=5,
    trim_cases=6,
    dropped_tokens=384,
    kept_tokens=256,
)
QUICK_SIZES = ProbeSizes(
    name="bench-quick",
    text_tokens=256,
    pass_key_distances=(512,),
    pass_keys_per_distance=3,
    trim_cases=2,
    dropped_tokens=256,
    kept_tokens=192,
)
# Smallest sizes that still ask a pass key and trim a conversation (the test suite's).
SMOKE_SIZES = ProbeSizes(
    name="bench-smoke",
    text_tokens=64,
    pass_key_distances=(96,),
    pass_keys_per_distance=1,
    trim_cases=1,
    dropped_tokens=64,
    kept_tokens=48,
)
PROBE_SIZES = {"full": FULL_SIZES, "quick": QUICK_SIZES, "smoke": SMOKE_SIZES}
"""`BenchSettings.fidelity_probes` names one of these."""
SUMMARY_MAX_TOKENS = 128


def available(ctx: BenchContext) -> str | None:
    """Available when the committed reference model is in this installation."""
    from app.core.modelkit.reference.install import MODEL_FILES, committed_folder

    folder = committed_folder()
    if not all((folder / name).is_file() for name in MODEL_FILES):
        return f"the reference model is missing ({folder})"
    return None


def _reference_engine(ctx: BenchContext):
    from app.bench.context import make_engine
    from app.core.modelkit.reference.install import install_reference_model

    scratch = Path(ctx.scratch or ctx.out_dir) / "fidelity"
    folder = scratch / "reference-model"
    if not folder.exists():
        install_reference_model(folder)
    engine = make_engine(scratch)
    engine.load(folder)
    return engine, folder


def run(ctx: BenchContext) -> PartResult:
    """Measure every cell on the reference model, plus summaries of dropped facts."""
    from app.core.engine.quality.quality_run import start_quality_check
    from app.core.quality.plan import plan_check

    if ctx.scratch is None and ctx.out_dir is None:
        raise NotAvailable("no scratch folder for the reference model")
    if ctx.settings.fidelity_probes not in PROBE_SIZES:
        raise ValueError(
            f"unknown fidelity_probes {ctx.settings.fidelity_probes!r}; choose from "
            f"{', '.join(PROBE_SIZES)}"
        )
    engine, folder = _reference_engine(ctx)
    try:
        sizes = PROBE_SIZES[ctx.settings.fidelity_probes]
        cells = list(ctx.settings.fidelity_cells) or None
        plan = plan_check(folder, sizes=sizes, only=cells)
        started = time.perf_counter()
        report = start_quality_check(engine, plan).wait()
        check_s = time.perf_counter() - started
        ctx.log(f"  fidelity: {len(report.results)} cells in {check_s:.0f} s")
        started = time.perf_counter()
        summaries = _dropped_fact_recall(engine, sizes)
        summary_s = time.perf_counter() - started
    finally:
        engine.shutdown()
    return _result(report, plan, summaries, check_s, summary_s)


def _dropped_fact_recall(engine, sizes: ProbeSizes) -> dict:
    """Recall of the dropped turn's fact through an extractive and a model summary."""
    from app.core.chat.model_messages import build_messages, summary_style
    from app.core.chat.trimmer import Trimmer
    from app.core.engine.quality.quality_scoring import ChatRenderer
    from app.core.quality.probes import build_probes

    loaded = engine.submit(engine._require_model).result()
    chat = ChatRenderer(loaded.tokenizer)
    probes = build_probes(sizes, chat.encode, chat.decode)
    style = summary_style(engine.render)
    kv = _full_precision()
    outcome: dict = {"extractive": [], "model": [], "fallbacks": 0}
    outcome.update(summary_tokens={"extractive": [], "model": []}, context_tokens=[])
    for index, case in enumerate(probes.trim_cases):
        key = f"fidelity-{index}"
        old = build_messages(
            case.system_prompt, [], [*case.dropped, *case.kept], style=style
        )
        trimmer = Trimmer(engine, key, kv, style)
        untrimmed = engine.render(old, False)
        engine.prefill(key, untrimmed, kv)
        for mode in ("extractive", "model"):
            summary, method, _ = trimmer.write_summary(
                mode, SUMMARY_MAX_TOKENS, old, list(case.dropped), len(case.kept), ""
            )
            outcome["fallbacks"] += method != mode
            trimmed = build_messages(
                case.system_prompt, [summary], list(case.kept), style=style
            )
            right = engine.submit(
                _answers,
                loaded,
                chat,
                trimmed,
                case.dropped_question,
                case.dropped_answer,
            ).result()
            outcome[mode].append(bool(right))
            outcome["summary_tokens"][mode].append(engine.count_tokens(summary))
            if mode == "extractive":
                trimmed_tokens = len(engine.render(trimmed, False))
                outcome["context_tokens"].append((len(untrimmed), trimmed_tokens))
        engine.drop_cache(key)
    return outcome


def _full_precision():
    from app.core.presets.generation_settings import KVSettings

    return KVSettings(bits=16)


def _answers(loaded, chat, messages, question, answer) -> bool:
    """Greedy recall of ``answer`` after ``messages`` (engine thread)."""
    from app.core.engine.quality import quality_scoring as scoring

    asked = chat.question(messages, question, answer)
    cache = scoring.new_cache(loaded.model, scoring.FULL_PRECISION)
    chunk = scoring.chunk_size(int(loaded.config.get("vocab_size") or 0))
    return bool(
        scoring.answer_correct(
            loaded.model, cache, asked.lead_ids, asked.answer_ids, chunk
        )
    )


def _result(report, plan, summaries, check_s: float, summary_s: float) -> PartResult:
    result = PartResult()
    full_bytes = plan.full_bytes_per_token
    contexts = summaries["context_tokens"]
    untrimmed = sum(c[0] for c in contexts) / len(contexts) if contexts else None
    trimmed = sum(c[1] for c in contexts) / len(contexts) if contexts else None
    rows, cells = [], []
    for cell_result in report.results:
        data = cell_result.to_dict()
        per_token = cell_result.kv_bytes_per_token
        data["kv_bytes_at_context"] = (
            per_token * BYTES_AT_TOKENS if per_token is not None else None
        )
        if cell_result.cell.kind != KV and full_bytes and untrimmed:
            tokens = untrimmed if cell_result.cell.trim == "none" else trimmed
            data["trim_context_tokens"] = tokens
            data["trim_kv_bytes"] = tokens * full_bytes
        cells.append(data)
        rows.append(_row(cell_result, data.get("trim_kv_bytes")))
    hits, total = report.reference_recall
    result.figures = {
        "model_folder": report.model_folder,
        "probe_sizes": report.settings_key,
        "reference_perplexity": report.reference_perplexity,
        "reference_recall": [hits, total],
        "bytes_at_tokens": BYTES_AT_TOKENS,
        "full_precision_bytes_per_token": full_bytes,
        "cells": cells,
        "dropped_fact_recall": {
            mode: [sum(summaries[mode]), len(summaries[mode])]
            for mode in ("extractive", "model")
        },
        "summary_tokens": summaries["summary_tokens"],
        "check_s": check_s,
        "summary_s": summary_s,
    }
    ppl = report.reference_perplexity
    rows.insert(
        0,
        Row(
            "16-bit KV (reference): perplexity, pass-key recall",
            f"{ppl:.2f}, {hits}/{total}" if ppl else f"{hits}/{total}",
            f"{full_bytes * BYTES_AT_TOKENS / 2**20:.1f} MiB at {BYTES_AT_TOKENS} tokens"
            if full_bytes
            else "—",
        ),
    )
    for mode in ("extractive", "model"):
        got = summaries[mode]
        tokens = summaries["summary_tokens"][mode]
        rows.append(
            Row(
                f"Dropped-turn fact through the {mode} summary (rebuild, 16-bit)",
                f"{sum(got)}/{len(got)} recalled",
                f"summary {min(tokens)}–{max(tokens)} tokens" if tokens else "—",
            )
        )
    result.rows = rows
    for cell_result in report.results:
        if cell_result.error is None and cell_result.cell.kind == KV:
            key = f"fidelity_{cell_result.cell.bits}bit_g{cell_result.cell.group_size}"
            result.ratios[f"{key}_top1"] = cell_result.top1_agreement
            result.ratios[f"{key}_kl"] = cell_result.mean_kl
    result.notes.append(
        "Measured on the trained reference model (3.7M parameters, a copy circuit "
        "written into its weights; docs/reference-model.md), not on the run's --model. "
        "Every position reads the quantized cache, its own chunk included. Its "
        "hand-built circuit is sharper than a naturally trained model's; read the "
        "numbers as the shape of the trade-off, and run `swapless check-quality` "
        "for your own model."
    )
    return result


def _row(r, trim_bytes: float | None = None) -> Row:
    if r.error:
        return Row(r.cell.label, f"not measured: {r.error}")
    parts = []
    if r.top1_agreement is not None:
        parts.append(f"top-1 {r.top1_agreement:.1%}")
    if r.mean_kl is not None:
        parts.append(f"KL {r.mean_kl:.2e}")
    if r.perplexity_ratio is not None:
        parts.append(f"PPL ×{r.perplexity_ratio:.3f}")
    parts.append(f"recall {r.recall_hits}/{r.recall_total}")
    if r.kv_bytes_per_token:
        bytes_text = (
            f"{r.kv_bytes_per_token * BYTES_AT_TOKENS / 2**20:.1f} MiB at "
            f"{BYTES_AT_TOKENS} tokens"
        )
    elif trim_bytes:
        when = "untrimmed" if r.cell.trim == "none" else "after the trim"
        bytes_text = f"{trim_bytes / 2**20:.2f} MiB {when} (16-bit)"
    else:
        bytes_text = "—"
    return Row(r.cell.label, ", ".join(parts), bytes_text)


def draw_recall_vs_kv_bytes(results: dict, path: Path) -> bool:
    """Plot pass-key recall and top-1 agreement against KV bytes; False without data."""
    part = results.get("parts", {}).get(NAME)
    if not part or part.get("status") != "ok":
        return False
    figures = part["figures"]
    points = [
        c for c in figures["cells"] if c.get("kv_bytes_at_context") and not c["error"]
    ]
    if not points:
        return False
    from app.bench.report.pyplot import pyplot

    plt = pyplot()
    hits, total = figures["reference_recall"]
    full = figures["full_precision_bytes_per_token"] * figures["bytes_at_tokens"]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    xs = [full / 2**20] + [c["kv_bytes_at_context"] / 2**20 for c in points]
    recall = [hits / total if total else 0] + [
        c["recall_hits"] / c["recall_total"] if c["recall_total"] else 0 for c in points
    ]
    top1 = [1.0] + [c["top1_agreement"] or 0 for c in points]
    ax.plot(xs, recall, "o", color="#d62728", label="pass-key recall")
    ax.plot(xs, top1, "s", color="#1f77b4", label="top-1 agreement with 16-bit")
    groups = ["16-bit"] + [c["cell"].split(":")[2] for c in points]
    for index, (x, y) in enumerate(zip(xs[1:], top1[1:], strict=True)):
        ax.annotate(
            f"g{groups[index + 1]}",
            (x, y),
            textcoords="offset points",
            xytext=(0, -14 - 9 * (index % 3)),
            ha="center",
            fontsize=7,
        )
    for bits in sorted({c["cell"].split(":")[1] for c in points}):
        cluster = [
            xs[i + 1] for i, c in enumerate(points) if c["cell"].split(":")[1] == bits
        ]
        ax.annotate(
            f"{bits}-bit KV",
            (sum(cluster) / len(cluster), 1.02),
            ha="center",
            fontsize=8,
        )
    ax.annotate("16-bit KV", (xs[0], 1.02), ha="center", fontsize=8)
    ax.set_xlabel(f"KV cache at {figures['bytes_at_tokens']} tokens (MiB)")
    ax.set_ylabel("share")
    ax.set_xlim(0, xs[0] * 1.1)
    ax.set_ylim(0, 1.08)
    ax.set_title("Reference model: recall and agreement vs KV bytes")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
