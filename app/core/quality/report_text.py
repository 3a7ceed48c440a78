"""Quality results in words and tables, for the CLI, the doctor and the UI.

One formatting for every place the numbers appear, so "4-bit KV on this model: 96 %
top-1, recall 9/10, measured 3 Dec" reads the same in `swapless doctor`, after
`swapless check-quality` and next to a preset.
"""

from __future__ import annotations

import textwrap
from datetime import datetime

from app.core.quality.cells import KV
from app.core.quality.events import QualityReport
from app.core.quality.metrics import FAILS, CellResult

EXPLANATION = (
    "top-1: how often the most likely next token equals full precision's (trims: an "
    "exact rebuild's); KL: how far the whole next-token distribution moved (nats, 0 = "
    "identical); PPL ratio: perplexity on the probe texts relative to full precision; "
    "recall: hidden facts answered exactly (the reference's count in brackets)."
)


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.1f} %"


def _kl(value: float | None) -> str:
    return "—" if value is None else f"{value:.2e}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _recall(result: CellResult) -> str:
    if not result.recall_total:
        return "—"
    return f"{result.recall_hits}/{result.recall_total} ({result.reference_hits})"


def measured_day(iso: str) -> str:
    """``2026-12-03T10:00:00Z`` → ``3 Dec``."""
    try:
        when = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return iso
    return f"{when.day} {when:%b}"


def one_line(result: CellResult, measured_at: str = "") -> str:
    """A result in one phrase, e.g. ``4-bit KV, group 64: 96.0 % top-1, recall 9/10``."""
    if result.error:
        return f"{result.cell.label}: not measured ({result.error})"
    parts = [f"{_percent(result.top1_agreement)} top-1"]
    if result.mean_kl is not None:
        parts.append(f"KL {_kl(result.mean_kl)}")
    if result.recall_total:
        parts.append(f"recall {result.recall_hits}/{result.recall_total}")
    text = f"{result.cell.label}: {', '.join(parts)}"
    if measured_at:
        text += f", measured {measured_day(measured_at)}"
    if not result.complete:
        text += " (stopped early)"
    if result.verdict == FAILS:
        text += " — fails a quality threshold on this model"
    return text


AGED_EXPLANATION = (
    "Aged KV (a preset's newest tokens exact, older ones at fewer bits): a probe "
    "shorter than a cell's exact window reads every token exact, so its cost shows only "
    "on longer contexts; its KV B/token is the average at the model's trained context."
)


def _short_percent(value: float) -> str:
    # Whole percents read best next to a preset, but 99.6 % must not round to 100 %.
    whole = f"{value * 100:.0f}"
    return f"{value * 100:.1f} %" if whole == "100" and value < 1 else f"{whole} %"


def short_line(result: CellResult, measured_at: str = "") -> str:
    """The phrase next to a preset, e.g. ``4-bit KV on this model: 96 % top-1, recall
    9/10, measured 3 Dec`` (the group is named only when it is not 64)."""
    cell = result.cell
    if cell.aging:
        name = cell.label  # the tiers: "aged KV (512 exact, then 4-bit), group 64"
    elif cell.kind == KV:
        name = f"{cell.bits}-bit KV"
        if cell.group_size != 64:
            name += f" (group {cell.group_size})"
    else:
        name = cell.label.capitalize()
    if result.error:
        return f"{name} on this model: not measured ({result.error})"
    parts = []
    if result.top1_agreement is not None:
        parts.append(f"{_short_percent(result.top1_agreement)} top-1")
    if result.recall_total:
        parts.append(f"recall {result.recall_hits}/{result.recall_total}")
    if measured_at:
        parts.append(f"measured {measured_day(measured_at)}")
    text = f"{name} on this model: {', '.join(parts)}"
    if not result.complete:
        text += " (stopped early)"
    return text


def table(report: QualityReport) -> str:
    """The whole report as a fixed-width table with a heading and the legend."""
    kind = "quick" if report.quick else "full"
    hits, total = report.reference_recall
    ppl = report.reference_perplexity
    heading = textwrap.fill(
        f"Quality check of {report.model_folder} ({kind} probes, "
        f"{report.seconds:.0f} s). Full-precision reference: "
        + (f"perplexity {ppl:.2f}, " if ppl else "")
        + f"pass keys {hits}/{total}.",
        width=88,
    )
    # Aged cells name their tiers: the label column widens to the longest label.
    width = max([28, *(len(r.cell.label) for r in report.results)])
    header = (
        f"{'':{width}} {'top-1':>8} {'mean KL':>9} {'PPL ratio':>9} "
        f"{'recall':>12} {'KV B/token':>10}  verdict"
    )
    lines = [heading, "", header]
    for r in report.results:
        label = f"{r.cell.label:{width}}"
        if r.error:
            lines.append(f"{label} not measured: {r.error}")
            continue
        per_token = f"{r.kv_bytes_per_token:.0f}" if r.kv_bytes_per_token else "—"
        verdict = r.verdict + ("" if r.complete else " (stopped)")
        lines.append(
            f"{label} {_percent(r.top1_agreement):>8} {_kl(r.mean_kl):>9} "
            f"{_ratio(r.perplexity_ratio):>9} {_recall(r):>12} {per_token:>10}  {verdict}"
        )
    if report.cancelled:
        lines.append("")
        lines.append("Stopped before the end: the rows above are what was measured.")
    lines += ["", textwrap.fill(EXPLANATION, width=88)]
    if any(r.cell.aging for r in report.results):
        lines += ["", textwrap.fill(AGED_EXPLANATION, width=88)]
    return "\n".join(lines)


def preset_warning(preset_name: str, result: CellResult) -> str | None:
    """A warning when a preset's KV precision fails a threshold, else None."""
    if result.error or result.verdict != FAILS or result.cell.kind != KV:
        return None
    return (
        f"Preset {preset_name!r} uses {result.cell.label}, which fails a quality "
        f"threshold on this model ({one_line(result)}). Consider 8-bit KV."
    )
