"""The seed's long-document experiment: whole at 16- and 4-bit KV vs segments at 4-bit.

The write-up Swapless started from read a ~60K-token document three ways on one
machine: default 16-bit KV fell from 24 tok/s at 8K to 8 at 20K and 2 past 30K before
the system froze; 4-bit KV alone held 11 tok/s at 30K but still swapped later; 4-bit KV
with segments of ~10K held ~18 tok/s per segment with peak memory under 40 % of RAM.

Here the same three readings run on the bench model, on a generated document of
``longdoc_tokens`` tokens cut in ``longdoc_segments`` segments:

* **whole, 16-bit and 4-bit KV**: the whole-document prompt is read in sixths; at each
  mark the context's KV bytes, MLX peak memory and the decode speed of a few tokens are
  measured. A reading stops where the memory budget or the model's trained context
  refuses the next mark, or where the next mark is predicted (from the prefill speed
  measured so far, quadratic in the context) to pass ``longdoc_budget_s``: each says
  where and why.
* **segments, 4-bit KV**: `LongDocumentRunner`, the code the app runs, per segment:
  decode tok/s of its notes, MLX peak memory and KV bytes. Its plan's time estimate
  (from a speed probe on this machine) is compared with the time the reading took.

Ratios: the last segment's tok/s ÷ the first's (target ≥ 0.9: a segment's cost must not
grow with the document), and the segmented peak memory ÷ each whole read's. One plot,
``longdoc_memory.png``. A random-weight model's words are noise; speeds and bytes are
real. On this CPU backend quantized KV prefills and decodes slower than float32 (see
``shared/NOTES-mlx.md``), the opposite of Apple Silicon, so the 4-bit figures show
memory, not speed, at their best.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
from pathlib import Path

from app.bench.context import BenchContext, Stopwatch, greedy, kv_settings
from app.bench.results import NotAvailable, PartResult, Row, yes_no
from app.bench.settings import TARGETS

NAME = "long_document"
TITLE = "Long document: whole at 16/4-bit KV vs segments at 4-bit (the seed's 60K test)"
WHOLE_BITS = (16, 4)
SEGMENT_BITS = 4
NOTES_TOKENS = 48
ANSWER_TOKENS = 16
TPS_KEY = "longdoc_segment_tps_last_vs_first"
TPS_TARGET = TARGETS[TPS_KEY].value
SEED_TOKENS = 60_000
PARAGRAPH_TOKENS = 120
QUESTION = "Which items are mentioned most often, and what do they cost?"
MIB = 2**20


def available(ctx: BenchContext) -> str | None:
    """Available once `app.core.longdoc.runner` exists in this build."""
    if importlib.util.find_spec("app.core.longdoc.runner") is None:
        return "not available in this build: app/core/longdoc/runner.py is missing"
    return None


def _document(ctx: BenchContext, tokens: int):
    from app.core.longdoc import DocumentText

    paragraphs = [
        ctx.filler(PARAGRAPH_TOKENS, seed=500 + index)
        for index in range(-(-tokens // PARAGRAPH_TOKENS))
    ]
    text = "\n\n".join(paragraphs)
    data = text.encode("utf-8")
    return DocumentText(
        name="bench-document.txt",
        path=Path(ctx.scratch or ctx.out_dir) / "bench-document.txt",
        text=text,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        encoding="utf-8",
    )


def _preset(bits: int, segment_tokens: int):
    from app.core.presets.presets import get_preset

    return get_preset("long-document").with_changes(
        kv_bits=bits,
        segment_tokens=segment_tokens,
        summary_max_tokens=NOTES_TOKENS,
        max_tokens=ANSWER_TOKENS,
        max_context=131_072,
        temperature=0.0,
        top_p=1.0,
    )


def _read_whole(ctx: BenchContext, document, bits: int) -> dict:
    """Read the whole-document prompt in sixths, measuring at each mark."""
    from app.core.errors import KnownError
    from app.core.longdoc.plan.speed import PrefillSample, fit_speed
    from app.core.longdoc.prompts import whole_messages

    s, engine = ctx.settings, ctx.engine
    preset = _preset(bits, s.longdoc_tokens)
    ids = engine.render(
        whole_messages(preset.system_prompt, QUESTION, document.read_text())
    )
    marks = [
        round(len(ids) * k / s.longdoc_segments)
        for k in range(1, s.longdoc_segments + 1)
    ]
    kv, key = kv_settings(bits), f"bench-longdoc-whole-{bits}"
    safe = engine.max_safe_context(bits, kv.group_size)
    trained = engine.trained_context()
    points: list[dict] = []
    samples: list[PrefillSample] = []
    stopped, spent, reached = None, 0.0, 0
    try:
        for mark in marks:
            if safe is not None and mark + s.longdoc_decode_tokens > safe:
                stopped = (
                    f"the memory budget refuses {mark:,} tokens (safe context "
                    f"{safe:,} at {bits}-bit)"
                )
                break
            if trained is not None and mark + s.longdoc_decode_tokens > trained:
                stopped = (
                    f"{mark:,} tokens is past the model's trained context of "
                    f"{trained:,}"
                )
                break
            speed = fit_speed(samples, [])
            predicted = speed.prefill_seconds(reached, mark) if speed else 0.0
            if points and spent + predicted > s.longdoc_budget_s:
                stopped = (
                    f"stopped before {mark:,} tokens: reading {mark - reached:,} more "
                    f"was predicted to take {predicted:.0f} s, past the "
                    f"{s.longdoc_budget_s:.0f} s budget"
                )
                break
            with Stopwatch() as prefill:
                report = engine.prefill(key, ids[:mark], kv)
            prefill_peak = engine.mlx_memory()[2]
            samples.append(PrefillSample(reached, mark, prefill.seconds))
            with Stopwatch() as decode:
                final = engine.side_generate(
                    key, ids[: mark + 1], kv, greedy(s.longdoc_decode_tokens)
                ).wait()
            spent += prefill.seconds + decode.seconds
            points.append(
                {
                    "context_tokens": mark,
                    "prefill_s": prefill.seconds,
                    "prefill_tokens_per_s": (mark - reached) / prefill.seconds,
                    "decode_tokens_per_s": final.tokens_per_s,
                    "kv_bytes": report.kv_bytes,
                    "peak_memory_bytes": max(prefill_peak, final.peak_memory_bytes),
                }
            )
            reached = mark
            ctx.log(
                f"  whole {bits}-bit: {mark:,} tokens, decode "
                f"{final.tokens_per_s:.1f} tok/s, KV {report.kv_bytes / MIB:.1f} MiB"
            )
    except KnownError as exc:  # the engine's guard refused it before allocating
        stopped = f"refused at {marks[len(points)]:,} tokens: {exc}"
    finally:
        engine.drop_cache(key)
    return {
        "bits": bits,
        "prompt_tokens": len(ids),
        "points": points,
        "reached_tokens": reached,
        "stopped": stopped,
        "seconds": spent,
    }


def _read_segments(ctx: BenchContext, document) -> dict:
    """Read the document in segments at 4-bit with the app's runner."""
    from app.core.longdoc import LongDocumentRunner, RunFinished, SegmentFinished
    from app.core.longdoc.events import RunStarted
    from app.core.longdoc.plan.speed import SpeedRecord
    from app.core.store import Store

    s = ctx.settings
    scratch = Path(ctx.scratch or ctx.out_dir)
    per_segment = _segment_tokens(ctx, document, s.longdoc_segments)
    preset = _preset(SEGMENT_BITS, per_segment)
    db = scratch / "long-document-segments.db"
    db.unlink(missing_ok=True)
    speeds = SpeedRecord(scratch / "long-document-speed.json")
    speeds.path.unlink(missing_ok=True)
    steps, started, finished, read = [], None, None, 0
    with Store.open(db) as store:
        runner = LongDocumentRunner(ctx.engine, store, preset, seed=0, speeds=speeds)
        with Stopwatch() as planning:
            plan = runner.plan(document, QUESTION, mode="segments")
        for event in runner.run(document, QUESTION, mode="segments", plan=plan):
            if isinstance(event, RunStarted):
                started = event
            elif isinstance(event, SegmentFinished):
                read += event.tokens
                steps.append(
                    {
                        "segment": event.index + 1,
                        "tokens_read": read,
                        "context_tokens": event.context_tokens,
                        "decode_tokens_per_s": event.tokens_per_s,
                        "prefill_s": event.prefill_s,
                        "seconds": event.seconds,
                        "kv_bytes": event.kv_bytes,
                        "peak_memory_bytes": event.peak_memory_bytes,
                    }
                )
                ctx.log(
                    f"  segments {SEGMENT_BITS}-bit: {event.index + 1}/"
                    f"{event.segments}, decode {event.tokens_per_s:.1f} tok/s, KV "
                    f"{event.kv_bytes / MIB:.1f} MiB"
                )
            elif isinstance(event, RunFinished):
                finished = event
    assert finished is not None and started is not None, "a run starts and finishes"
    return {
        "bits": SEGMENT_BITS,
        "segment_tokens": per_segment,
        "segments": finished.segments,
        "document_tokens": finished.document_tokens,
        "steps": steps,
        "max_kv_bytes": finished.max_kv_bytes,
        "peak_memory_bytes": finished.peak_memory_bytes,
        "seconds": finished.seconds,
        "planning_s": planning.seconds,
        "predicted_s": started.estimate_s,
        "plan_line": started.plan_line,
    }


def _segment_tokens(ctx: BenchContext, document, segments: int) -> int:
    """The smallest segment length (in steps of 32) that cuts the text in ``segments``.

    Segments end at paragraph ends, so a sixth of the tokens alone leaves a seventh,
    short segment.
    """
    from app.core.longdoc.segmenter import split_segments

    text, count = document.read_text(), ctx.engine.count_tokens
    tokens = -(-count(text) // segments)
    while len(split_segments(text, tokens, count)) > segments:
        tokens += 32
    return tokens


def run(ctx: BenchContext) -> PartResult:
    """Read one document whole at 16 and 4 bits and in segments at 4 bits."""
    if importlib.util.find_spec("app.core.longdoc.runner") is None:
        raise NotAvailable("not available in this build")
    s = ctx.settings
    document = _document(ctx, s.longdoc_tokens)
    whole = {bits: _read_whole(ctx, document, bits) for bits in WHOLE_BITS}
    segmented = _read_segments(ctx, document)
    result = PartResult()
    steps = segmented["steps"]
    first, last = steps[0]["decode_tokens_per_s"], steps[-1]["decode_tokens_per_s"]
    tps_ratio = last / first if first > 0 else math.nan
    result.ratios[TPS_KEY] = tps_ratio
    result.targets_met[TPS_KEY] = TARGETS[TPS_KEY].holds(tps_ratio)
    peaks = {}
    for bits, reading in whole.items():
        if reading["points"]:
            peak = max(p["peak_memory_bytes"] for p in reading["points"])
            peaks[bits] = segmented["peak_memory_bytes"] / peak
            result.ratios[f"longdoc_peak_segmented_vs_whole_{bits}bit"] = peaks[bits]
    if segmented["predicted_s"]:
        result.ratios["longdoc_time_measured_vs_predicted"] = (
            segmented["seconds"] / segmented["predicted_s"]
        )
    result.figures = {
        "document_tokens": segmented["document_tokens"],
        "seed_tokens": SEED_TOKENS,
        "notes_tokens": NOTES_TOKENS,
        "whole": {str(bits): reading for bits, reading in whole.items()},
        "segmented": segmented,
    }
    result.rows = _rows(s, whole, segmented, tps_ratio, peaks)
    result.notes.append(
        f"Long document: a {segmented['document_tokens']:,}-token document (the "
        f"seed's experiment used ~{SEED_TOKENS // 1000}K); a whole read stops at "
        f"{s.longdoc_budget_s:.0f} s and says where; one run per reading, so no "
        f"spread. Whole reads decode "
        f"{s.longdoc_decode_tokens} tokens at each sixth of the prompt; segments "
        f"write {NOTES_TOKENS} tokens of notes each."
    )
    return result


def _rows(s, whole: dict, segmented: dict, tps_ratio: float, peaks: dict) -> list[Row]:
    rows = []
    doc = segmented["document_tokens"]
    for bits, reading in whole.items():
        points = reading["points"]
        if points:
            speeds = " / ".join(f"{p['decode_tokens_per_s']:.1f}" for p in points)
            marks = " / ".join(f"{p['context_tokens'] / 1000:.1f}K" for p in points)
            value = f"{speeds} tok/s at {marks}"
        else:
            value = "no mark reached"
        if reading["stopped"]:
            value += f"; {reading['stopped']}"
        rows.append(
            Row(
                f"Long document ({doc:,} tokens) read whole, {bits}-bit KV: decode "
                "tok/s per sixth of the context",
                value,
            )
        )
        if points:
            end = points[-1]
            rows.append(
                Row(
                    f"Same, at {end['context_tokens']:,} tokens: KV / MLX peak; "
                    "prefill time so far",
                    f"{end['kv_bytes'] / MIB:.1f} MiB / "
                    f"{end['peak_memory_bytes'] / MIB:.0f} MiB; "
                    f"{sum(p['prefill_s'] for p in points):.0f} s",
                )
            )
    steps = segmented["steps"]
    rows.append(
        Row(
            f"Long document in {segmented['segments']} segments of ≤ "
            f"{segmented['segment_tokens']:,} tokens, {SEGMENT_BITS}-bit KV: decode "
            "tok/s per segment",
            " / ".join(f"{p['decode_tokens_per_s']:.1f}" for p in steps),
        )
    )
    rows.append(
        Row(
            "Segments: last segment's tok/s ÷ first's",
            f"{tps_ratio:.3f}",
            target=f"≥ {TPS_TARGET:g}",
            held=yes_no(tps_ratio >= TPS_TARGET),
        )
    )
    rows.append(
        Row(
            "Segments: largest KV / MLX peak memory",
            f"{segmented['max_kv_bytes'] / MIB:.1f} MiB / "
            f"{segmented['peak_memory_bytes'] / MIB:.0f} MiB",
        )
    )
    for bits, ratio in peaks.items():
        reached = whole[bits]["reached_tokens"]
        partial = (
            " (whole read stopped early: a lower bound of its peak)"
            if (whole[bits]["stopped"])
            else ""
        )
        rows.append(
            Row(
                f"MLX peak memory, segments ÷ whole {bits}-bit (whole at "
                f"{reached:,} tokens){partial}",
                f"{ratio:.2f}",
            )
        )
    if segmented["predicted_s"]:
        rows.append(
            Row(
                "Segmented reading time: measured / predicted by its plan (speed "
                "probed here)",
                f"{segmented['seconds']:.0f} s / {segmented['predicted_s']:.0f} s "
                f"(ratio {segmented['seconds'] / segmented['predicted_s']:.2f}); "
                f"planning {segmented['planning_s']:.1f} s",
            )
        )
    return rows
