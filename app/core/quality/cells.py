"""The grid of compressions a quality check compares against full precision.

A *cell* is one way Swapless saves memory: a KV precision (bits × quantization group)
or a trim method. KV cells are compared with a full-precision cache on the same
prompts; trim cells with an exact rebuild of the trimmed conversation. The grid always
holds 8 and 4 bits at groups 32, 64 and 128, plus whatever precision the presets use,
so every preset a user may pick has a measured row. A preset whose KV precision ages
(issue 20: recent tokens exact, older ones at fewer bits) adds an *aged* KV cell, its
tiers in the cell's key, measured the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.core.presets.generation_settings import VALID_KV_GROUPS, KVAging, KVSettings

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
        aging: For aged KV cells: the tiers' `KVAging.spec` (``bits`` is the floor's
            key bits); empty for uniform precision.
    """

    kind: str
    bits: int = 16
    group_size: int = 64
    trim: str = ""
    aging: str = ""

    def __post_init__(self):
        if self.kind not in (KV, TRIM):
            raise ValueError(f"cell kind must be {KV!r} or {TRIM!r}, got {self.kind!r}")
        if self.kind == TRIM and self.trim not in TRIM_METHODS:
            raise ValueError(
                f"trim must be one of {', '.join(TRIM_METHODS)}, got {self.trim!r}"
            )
        if self.aging and (
            self.kind != KV or KVAging.from_spec(self.aging).floor_key_bits != self.bits
        ):
            raise ValueError(f"aging {self.aging!r} does not fit a {self.kind} cell")

    @property
    def kv_settings(self) -> KVSettings:
        """The KV precision a KV cell measures."""
        if self.aging:
            return KVSettings.aged(KVAging.from_spec(self.aging), self.group_size)
        return KVSettings(bits=self.bits, group_size=self.group_size)

    @property
    def key(self) -> str:
        """A stable text key (stored with results): ``kv:8:64``, ``trim:splice``, or
        ``kv:8:64:r1024+k8v8/256`` for an aged cell."""
        if self.aging:
            return f"{KV}:{self.bits}:{self.group_size}:{self.aging}"
        if self.kind == KV:
            return f"{KV}:{self.bits}:{self.group_size}"
        return f"{TRIM}:{self.trim}"

    @property
    def label(self) -> str:
        """How the cell is named to the user."""
        if self.aging:
            tiers = KVAging.from_spec(self.aging).label()
            return f"aged KV ({tiers}), group {self.group_size}"
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
            if parts[0] == KV and len(parts) == 4:
                return cls(KV, int(parts[1]), int(parts[2]), aging=parts[3])
            if parts[0] == TRIM and len(parts) == 2:
                return cls(TRIM, trim=parts[1])
        except ValueError:
            pass
        raise ValueError(f"not a quality cell key: {key!r}")


def kv_cell(bits: int, group_size: int) -> Cell:
    """The KV cell of a precision (16 bits ignores the group)."""
    return Cell(KV, bits, 64 if bits == 16 else group_size)


def aged_cell(aging: KVAging, group_size: int) -> Cell:
    """The KV cell of an aged precision."""
    return Cell(KV, aging.floor_key_bits, group_size, aging=aging.spec)


def settings_cell(kv: KVSettings) -> Cell:
    """The KV cell that measures ``kv`` (aged or uniform)."""
    if kv.aging is not None:
        return aged_cell(kv.aging, kv.group_size)
    return kv_cell(kv.bits, kv.group_size)


CONTROL = kv_cell(16, 64)
"""Full precision against itself: asked for explicitly, it checks the check."""


def grid(
    preset_precisions: Iterable[tuple[int, int]] = (),
    head_dim: int | None = None,
    trims: bool = True,
    preset_agings: Iterable[tuple[KVAging, int]] = (),
) -> list[Cell]:
    """The cells to measure, in the order they run.

    Args:
        preset_precisions: ``(bits, group)`` of every preset; 16-bit ones add nothing.
        head_dim: The model's attention head size; groups that do not divide it are
            left out (mlx-lm cannot quantize with them).
        trims: Include the splice / rebuild / no-trim cells.
        preset_agings: ``(tiers, group)`` of every preset whose KV precision ages.

    Returns:
        KV cells (8 then 4 bits, groups ascending, then preset extras, then the
        presets' aged cells), then trims.
    """
    wanted = {(b, g) for b in GRID_BITS for g in VALID_KV_GROUPS}
    wanted |= {(b, g) for b, g in preset_precisions if b != 16}
    cells = [
        kv_cell(b, g)
        for b, g in sorted(wanted, key=lambda bg: (-bg[0], bg[1]))
        if head_dim is None or head_dim % g == 0
    ]
    aged = {aged_cell(aging, g) for aging, g in preset_agings}
    cells += sorted(
        (c for c in aged if head_dim is None or head_dim % c.group_size == 0),
        key=run_order,
    )
    if trims:
        cells += [Cell(TRIM, trim=method) for method in TRIM_METHODS]
    return cells


def run_order(cell: Cell) -> tuple:
    """Sort key of the grid's order: KV cells (more bits first, groups up; aged ones
    after the uniform), then trims."""
    if cell.kind == KV:
        return (0, bool(cell.aging), -cell.bits, cell.group_size, cell.aging)
    return (1, 0, 0, TRIM_METHODS.index(cell.trim), "")
