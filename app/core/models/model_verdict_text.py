"""The model manager's details pane: a model and its verdict for this machine, as HTML.

Qt-free, so the wording is tested without a window. Names and paths come from the disk
and are escaped; the usable context per KV precision is memory's limit capped by the
context the model was trained for, and the text says which of the two set it.
"""

from __future__ import annotations

import html

from app.core.models.model_catalog import LocalModel, ModelVerdict, format_tokens
from app.core.text.display_numbers import format_bytes


def verdict_details(model: LocalModel, verdict: ModelVerdict | None) -> str:
    """Rich text describing a model and its verdict for the details pane."""
    lines = [
        f"<b>{html.escape(model.name)}</b><br/>"
        f"<span style='color: gray'>{html.escape(str(model.path))}</span><br/>"
    ]
    lines.append(f"{format_bytes(model.size_bytes)} on disk · {model.source_label}")
    if model.is_demo:
        lines.append("<br/><i>Random weights: replies are noise.</i>")
    if verdict is None:
        lines.append("<br/>Checking whether it fits…")
        return "".join(lines)
    lines.append(f"<p>{html.escape(verdict.summary)}</p>")
    report = verdict.report
    if report is not None:
        info = report["model"]
        lines.append(
            f"<p>{html.escape(str(info['model_type']))}, {info['layers']} layers, "
            f"{format_bytes(info['weights_bytes'])} of weights in memory here; budget "
            f"{format_bytes(report['settings']['budget_bytes'])} for weights + KV cache.</p>"
        )
        rows = "".join(
            f"<tr><td>{bits}-bit KV&nbsp;&nbsp;</td>"
            f"<td>{_per_token(report['kv_bytes_per_token'][bits])}/token&nbsp;&nbsp;</td>"
            f"<td>{_usable(verdict, bits)}</td></tr>"
            for bits in ("16", "8", "4")
        )
        lines.append(f"<table>{rows}</table>")
        notes = list(info.get("notes", [])) + [
            f"{bits}-bit KV unavailable: {why}"
            for bits, why in verdict.kv_errors.items()
        ]
        if notes:
            lines.append(
                "<ul>"
                + "".join(f"<li>{html.escape(str(n))}</li>" for n in notes)
                + "</ul>"
            )
    return "".join(lines)


def _per_token(value) -> str:
    return format_bytes(value) if value else "–"


def _usable(verdict: ModelVerdict, bits: str) -> str:
    if bits in verdict.kv_errors:
        return "unavailable"
    usable = verdict.usable_context(bits)
    if usable is None:
        return "not limited by memory"
    text = f"usable context {format_tokens(usable)}"
    if verdict.capped_by_training(bits):
        safe = verdict.max_safe_context.get(bits)
        allows = (
            f"memory allows {format_tokens(safe)}"
            if safe
            else "memory does not limit it"
        )
        text += f" (the trained context; {allows})"
    return text
