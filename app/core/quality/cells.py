"""The grid of compressions a quality check compares against full precision.

A *cell* is one way Swapless saves memory: a KV precision (bits × quantization group)
or a trim method. KV cells are compared with a full-precision cache on the same
prompts; trim cells with an exact rebuild of the trimmed conversation. The grid always
holds 8 and 4 bits at groups 32, 64 and 128, plus whatever precision the presets use,
so every preset a user may pick has a measured row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.core.generation_settings import VALID_KV_GROUPS

KV = "kv"
TRIM = "trim"
TRIM_METHODS = ("splice", "rebuild", "none")
GRID_BITS = (8, 4)


@dataclass(frozen=True, order=True)
class Cell:
    """One compression to measure.

    Attributes:
        kind: ``kv`` or ``trim``.
        bits: KV bits (16 for trim cells, which run at full precision so that only
            the trim differs).
        group_size: KV quantization group.
        trim: For trim cells: ``splice``, ``rebuild`` or ``none`` (the untrimmed cache).
    """

    kind: str
    bits: int = 16
    group_size: int = 64
    trim: str = ""

    def __post_init__(self):
        if self.kind not in (KV, TRIM):
            raise ValueError(f"cell kind must be {KV!r} or {TRIM!r}, got {self.kind!r}")
        if self.kind == TRIM and self.trim not in TRIM_METHODS:
            raise ValueError(
                f"trim must be one of {', '.join(TRIM_METHODS)}, got {self.trim!r}"
            )

    @property
    def key(self) -> str:
        """A stable text key (stored with results): ``kv:8:64``, ``trim:splice``."""
        if self.kind == KV:
            return f"{KV}:{self.bits}:{self.group_size}"
        return f"{TRIM}:{self.trim}"

    @property
    def label(self) -> str:
        """How the cell is named to the user."""
        if self.kind == KV:
            if self.bits == 16:
                return "16-bit KV (full precision)"
            return f"{self.bits}-bit KV, group {self.group_size}"
        return {
            "splice": "splice trim",
            "rebuild": "rebuild trim",
            "none": "no trim",
        }[self.trim]

    @classmethod
    def from_key(cls, key: str) -> Cell:
        """Parse a `key` back into a cell.

        Raises:
            ValueError: If ``key`` is not a cell key.
        """
        parts = key.split(":")
        try:
            if parts[0] == KV and len(parts) == 3:
                return cls(KV, int(parts[1]), int(parts[2]))
            if parts[0] == TRIM and len(parts) == 2:
                return cls(TRIM, trim=parts[1])
        except ValueError:
            pass
        raise ValueError(f"not a quality cell key: {key!r}")


def kv_cell(bits: int, group_size: int) -> Cell:
    """The KV cell of a precision (16 bits ignores the group)."""
    return Cell(KV, bits, 64 if bits == 16 else group_size)


CONTROL = kv_cell(16, 64)
"""Full precision against itself: asked for explicitly, it checks the check."""


def grid(
    preset_precisions: Iterable[tuple[int, int]] = (),
    head_dim: int | None = None,
    trims: bool = True,
) -> list[Cell]:
    """The cells to measure, in the order they run.

    Args:
        preset_precisions: ``(bits, group)`` of every preset; 16-bit ones add nothing.
        head_dim: The model's attention head size; groups that do not divide it are
            left out (mlx-lm cannot quantize with them).
        trims: Include the splice / rebuild / no-trim cells.

    Returns:
        KV cells (8 then 4 bits, groups ascending, then preset extras), then trims.
    """
    wanted = {(b, g) for b in GRID_BITS for g in VALID_KV_GROUPS}
    wanted |= {(b, g) for b, g in preset_precisions if b != 16}
    cells = [
        kv_cell(b, g)
        for b, g in sorted(wanted, key=lambda bg: (-bg[0], bg[1]))
        if head_dim is None or head_dim % g == 0
    ]
    if trims:
        cells += [Cell(TRIM, trim=method) for method in TRIM_METHODS]
    return cells


def run_order(cell: Cell) -> tuple:
    """Sort key of the grid's order: KV cells (more bits first, groups up), then trims."""
    if cell.kind == KV:
        return (0, -cell.bits, cell.group_size, "")
    return (1, 0, 0, TRIM_METHODS.index(cell.trim))
