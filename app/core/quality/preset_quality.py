"""What the stored quality results say about each preset, for the places presets are picked.

A preset compresses twice: its KV precision (``kv_bits``/``kv_group``) and its trim
method. Given the latest stored result of every cell for one model, each preset gets
the line shown next to it ("4-bit KV, group 64: 96.0 % top-1, recall 9/10, measured
3 Dec") and, when its KV precision fails a threshold on this model, a warning: shown
to the user, never acted on silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from app.core.quality.cells import TRIM, Cell, kv_cell, settings_cell
from app.core.quality.metrics import FAILS, CellResult
from app.core.quality.report_text import one_line, preset_warning, short_line

NOT_MEASURED = "not measured on this model — Check quality in Models"


@dataclass(frozen=True)
class StoredResult:
    """A cell's latest stored result.

    Attributes:
        result: The measured numbers.
        measured_at: ISO time (UTC) of the check that measured it.
        settings_key: The probe set (``probes-v1:quick`` …).
    """

    result: CellResult
    measured_at: str
    settings_key: str

    @property
    def quick(self) -> bool:
        """True when measured with the quick probes."""
        return self.settings_key.endswith(":quick")


@dataclass(frozen=True)
class PresetQuality:
    """The measured cost of one preset's compression on one model.

    Attributes:
        preset: The preset's name.
        kv: Its KV precision's stored result (None at 16 bits or when unmeasured).
        trim: Its trim method's stored result, or None.
        warning: Set when the KV precision fails a threshold on this model.
    """

    preset: str
    kv: StoredResult | None
    trim: StoredResult | None
    warning: str | None

    @property
    def measured(self) -> bool:
        """True when anything about this preset was measured."""
        return self.kv is not None or self.trim is not None

    @property
    def fails(self) -> bool:
        """True when the preset's KV precision fails a threshold."""
        return self.kv is not None and self.kv.result.verdict == FAILS

    @property
    def summary(self) -> str:
        """The short phrase shown beside the preset: its KV precision's result, else
        its trim's (a 16-bit preset loses nothing to KV precision), else `NOT_MEASURED`.
        """
        stored = self.kv or self.trim
        if stored is None:
            return NOT_MEASURED
        return short_line(stored.result, stored.measured_at)

    def lines(self) -> list[str]:
        """One line per measured compression of the preset."""
        return [
            one_line(stored.result, stored.measured_at)
            for stored in (self.kv, self.trim)
            if stored is not None
        ]


class PresetLike(Protocol):
    """What the quality rows read from a preset."""

    @property
    def kv_bits(self) -> int: ...
    @property
    def kv_group(self) -> int: ...
    @property
    def trim_method(self) -> str: ...


def preset_quality(
    presets: Mapping[str, PresetLike], stored: Mapping[str, StoredResult]
) -> list[PresetQuality]:
    """Pair every preset with the stored results of its compressions.

    Args:
        presets: Name → `Preset` (anything with ``kv_bits``, ``kv_group`` and
            ``trim_method``).
        stored: ``Cell.key`` → latest `StoredResult` for the model.

    Returns:
        One `PresetQuality` per preset, in the order given.
    """
    out = []
    for name, preset in presets.items():
        kv = None
        if preset.kv_bits != 16:
            kv = stored.get(_kv_cell_of(preset).key)
        trim = stored.get(Cell(TRIM, trim=preset.trim_method).key)
        warning = preset_warning(name, kv.result) if kv is not None else None
        out.append(PresetQuality(name, kv, trim, warning))
    return out


def _kv_cell_of(preset: PresetLike) -> Cell:
    """The cell measuring a preset's KV precision (its aged cell when it ages)."""
    settings = getattr(preset, "kv_settings", None)
    if settings is not None:
        return settings_cell(settings())
    return kv_cell(preset.kv_bits, preset.kv_group)


def doctor_lines(
    rows: list[PresetQuality], stored: Mapping[str, StoredResult]
) -> list[str]:
    """The doctor's quality section: every stored cell, then preset warnings."""
    if not stored:
        return [
            "Quality: not measured on this model yet; `swapless check-quality --model "
            "DIR` (or --quick) measures what 8/4-bit KV and trims cost on it."
        ]
    lines = ["Quality measured on this model (swapless check-quality):"]
    for entry in stored.values():
        kind = "quick probes" if entry.quick else "full probes"
        lines.append(f"  {one_line(entry.result, entry.measured_at)} [{kind}]")
    for row in rows:
        if row.warning:
            lines.append(f"  Warning: {row.warning}")
    return lines


def stored_to_dict(stored: Mapping[str, StoredResult]) -> dict:
    """JSON form of stored results (for ``doctor --json``)."""
    return {
        key: {
            **entry.result.to_dict(),
            "measured_at": entry.measured_at,
            "settings_key": entry.settings_key,
        }
        for key, entry in stored.items()
    }
