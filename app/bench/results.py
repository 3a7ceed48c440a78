"""What one measurement returns, and the exception for a feature this build lacks."""

from __future__ import annotations

from dataclasses import dataclass, field


class NotAvailable(Exception):
    """The feature a measurement needs is not in this build; the part is skipped."""


@dataclass(frozen=True)
class Row:
    """One line of the Markdown table.

    Attributes:
        measurement: What was compared, with its conditions.
        result: The median (ratio or absolute figure), formatted.
        spread: min–max and count, formatted.
        target: The target, or ``—``.
        held: ``yes``, ``no`` or ``—``.
    """

    measurement: str
    result: str
    spread: str = "—"
    target: str = "—"
    held: str = "—"


@dataclass
class PartResult:
    """Everything one measurement found.

    Attributes:
        figures: Every raw figure (JSON-ready), under the part's entry in results.json.
        ratios: Top-level ratio medians this part contributes (a float, or a dict of
            floats keyed e.g. by KV bits).
        ratio_stats: Full summaries (median, min, max, quartiles, samples) of the same
            keys.
        targets_met: For each ratio key with a target: whether it held.
        rows: Table lines.
        notes: Caveats a reader must know (shown under the table).
    """

    figures: dict = field(default_factory=dict)
    ratios: dict = field(default_factory=dict)
    ratio_stats: dict = field(default_factory=dict)
    targets_met: dict = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def yes_no(value: bool | None) -> str:
    """Table text of a target check."""
    if value is None:
        return "—"
    return "yes" if value else "no"
