"""Long document read in segments vs whole: KV bytes, peak memory and time.

Uses `app.core.longdoc.runner.LongDocumentRunner`, the code the app runs, on a
generated document: once forced to ``segments`` and once to ``whole``, each in a fresh
store (a reading of the same file would otherwise be resumed). The ``long-document``
preset is used with an unquantized cache (an 8K-token prefill at 4 bits takes minutes
on this CPU; the precision scales both modes alike) and short notes and answers (a
random-weight model never stops on its own). Per step: tokens read so far, KV bytes
and MLX peak memory, which `plots` draws as ``longdoc_memory.png``.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.results import NotAvailable, PartResult, Row

NAME = "long_document"
TITLE = "Long document: segmented vs whole"
KV_BITS_USED = 16
NOTES_TOKENS = 48
ANSWER_TOKENS = 16
QUESTION = "Which items are mentioned most often, and what do they cost?"


def available(ctx: BenchContext) -> str | None:
    """Available once `app.core.longdoc.runner` exists in this build."""
    if importlib.util.find_spec("app.core.longdoc.runner") is None:
        return "not available in this build: app/core/longdoc/runner.py is missing"
    return None


def _document(ctx: BenchContext, tokens: int):
    from app.core.longdoc import DocumentText

    paragraphs = []
    per_paragraph = 120
    for index in range(-(-tokens // per_paragraph)):
        paragraphs.append(ctx.filler(per_paragraph, seed=500 + index))
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


def _read(ctx: BenchContext, document, mode: str, segment_tokens: int) -> dict:
    from app.core.longdoc import LongDocumentRunner, RunFinished, SegmentFinished
    from app.core.longdoc.events import RunStarted
    from app.core.presets import get_preset
    from app.core.store import Store

    preset = get_preset("long-document").with_changes(
        kv_bits=KV_BITS_USED,
        segment_tokens=segment_tokens,
        summary_max_tokens=NOTES_TOKENS,
        max_tokens=ANSWER_TOKENS,
        temperature=0.0,
        top_p=1.0,
    )
    db = Path(ctx.scratch or ctx.out_dir) / f"long-document-{mode}.db"
    db.unlink(missing_ok=True)
    store = Store.open(db)
    steps, started, finished = [], None, None
    try:
        runner = LongDocumentRunner(ctx.engine, store, preset, seed=0)
        read = 0
        for event in runner.run(document, QUESTION, mode=mode):
            if isinstance(event, RunStarted):
                started = event
            elif isinstance(event, SegmentFinished):
                read += event.tokens
                steps.append(
                    {
                        "step": f"segment {event.index + 1}",
                        "tokens": read,
                        "kv_bytes": event.kv_bytes,
                        "context_tokens": event.context_tokens,
                        "peak_memory_bytes": event.peak_memory_bytes,
                        "seconds": event.seconds,
                    }
                )
            elif isinstance(event, RunFinished):
                finished = event
    finally:
        store.close()
    steps.append(
        {
            "step": "answer",
            "tokens": started.document_tokens,
            "kv_bytes": finished.max_kv_bytes if mode == "whole" else None,
            "context_tokens": None,
            "peak_memory_bytes": finished.peak_memory_bytes,
            "seconds": None,
        }
    )
    return {
        "mode": finished.mode,
        "document_tokens": finished.document_tokens,
        "segments": finished.segments,
        "planned_context_tokens": started.context_tokens,
        "planned_kv_bytes_limit": started.kv_bytes_limit,
        "max_kv_bytes": finished.max_kv_bytes,
        "peak_memory_bytes": finished.peak_memory_bytes,
        "seconds": finished.seconds,
        "steps": steps,
    }


def _point(step: dict) -> dict:
    return {
        "tokens": step["tokens"],
        "kv_bytes": step["kv_bytes"],
        "peak_memory_bytes": step["peak_memory_bytes"],
    }


def run(ctx: BenchContext) -> PartResult:
    """Read one document both ways and compare memory and time."""
    if importlib.util.find_spec("app.core.longdoc.runner") is None:
        raise NotAvailable("not available in this build")
    s = ctx.settings
    tokens, segment_tokens = s.longdoc_tokens, s.longdoc_segment_tokens
    document = _document(ctx, tokens)
    runs = {
        mode: _read(ctx, document, mode, segment_tokens)
        for mode in ("segments", "whole")
    }
    seg, whole = runs["segments"], runs["whole"]
    result = PartResult()
    series = {
        "segmented": [_point(p) for p in seg["steps"] if p["kv_bytes"] is not None],
        "whole": [
            {
                "tokens": whole["document_tokens"],
                "kv_bytes": whole["max_kv_bytes"],
                "peak_memory_bytes": whole["peak_memory_bytes"],
            }
        ],
    }
    result.figures = {
        "kv_bits": KV_BITS_USED,
        "segment_tokens": segment_tokens,
        "notes_tokens": NOTES_TOKENS,
        "runs": runs,
        "memory_series": series,
    }
    result.ratios["longdoc_kv_segmented_vs_whole"] = (
        seg["max_kv_bytes"] / whole["max_kv_bytes"]
    )
    result.ratios["longdoc_peak_segmented_vs_whole"] = (
        seg["peak_memory_bytes"] / whole["peak_memory_bytes"]
    )
    result.ratios["longdoc_time_segmented_vs_whole"] = seg["seconds"] / whole["seconds"]
    mib = 2**20
    doc = seg["document_tokens"]
    result.rows = [
        Row(
            f"Long document ({doc} tokens, {KV_BITS_USED}-bit KV): largest KV, "
            f"{seg['segments']} segments / whole",
            f"{seg['max_kv_bytes'] / mib:.1f} MiB / {whole['max_kv_bytes'] / mib:.1f} MiB "
            f"(ratio {result.ratios['longdoc_kv_segmented_vs_whole']:.2f})",
        ),
        Row(
            "Long document: MLX peak memory, segments / whole",
            f"{seg['peak_memory_bytes'] / mib:.0f} MiB / "
            f"{whole['peak_memory_bytes'] / mib:.0f} MiB",
        ),
        Row(
            "Long document: wall time, segments / whole (one run each)",
            f"{seg['seconds']:.1f} s / {whole['seconds']:.1f} s",
        ),
    ]
    result.notes.append(
        "Long document: one run per mode, so no spread; the segmented time includes "
        f"writing {NOTES_TOKENS} tokens of notes per segment."
    )
    return result
