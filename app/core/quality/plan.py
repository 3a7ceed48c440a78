"""What a quality check of one model folder will measure, decided before it runs.

Pure: from the folder's config.json and the presets it derives the cells (every
group the head size allows, plus the presets' precisions, aged ones included) and the
cache bytes per token of each, so memory and quality are reported side by side. An
aged cache's bytes per token fall as it grows (its newest tokens are exact, the rest
quantized), so its figure is the average at the model's trained context.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.budget.aged_budget import aged_kv_bytes_at
from app.core.budget.kv_budget import bytes_per_token
from app.core.budget.model_geometry import read_geometry
from app.core.budget.runtime_profile import runtime_profile
from app.core.quality import cells as cell_grid
from app.core.quality.cells import KV, Cell
from app.core.quality.probes import FULL, QUICK, ProbeSizes

# Where an aged cell's average bytes per token are taken when config.json does not
# say how long the model's context is.
AGED_BYTES_AT_TOKENS = 8192


@dataclass(frozen=True)
class CheckPlan:
    """The cells of a check and what each KV cell costs in memory.

    Attributes:
        sizes: `QUICK` or `FULL` probe sizes.
        cells: Cells in run order.
        bytes_per_token: ``Cell.key`` → cache bytes per token on this machine (aged
            cells: the average at the model's trained context).
        max_context: The model's trained context (pass keys beyond it are skipped).
        full_bytes_per_token: The unquantized cache's bytes per token here.
    """

    sizes: ProbeSizes
    cells: tuple[Cell, ...]
    bytes_per_token: dict[str, float]
    max_context: int | None
    full_bytes_per_token: float | None = None

    def kv_bytes_per_token(self, cell: Cell) -> float | None:
        """The cache bytes per token of a KV cell, or None."""
        return self.bytes_per_token.get(cell.key)


def preset_precisions() -> list[tuple[int, int]]:
    """``(bits, group)`` of every built-in and user preset."""
    from app.core.presets.presets import all_presets

    return sorted({(p.kv_bits, p.kv_group) for p in all_presets().values()})


def preset_agings() -> list[tuple]:
    """``(KVAging, group)`` of every built-in and user preset whose KV precision ages."""
    from app.core.presets.presets import all_presets

    found = set()
    for preset in all_presets().values():
        kv = preset.kv_settings()
        if kv.aging is not None:
            found.add((kv.aging, kv.group_size))
    return sorted(found, key=lambda pair: (pair[0].spec, pair[1]))


def plan_check(
    model_dir: Path,
    quick: bool = False,
    trims: bool = True,
    only: list[str] | None = None,
    sizes: ProbeSizes | None = None,
) -> CheckPlan:
    """Decide the cells of a check of ``model_dir``.

    Args:
        model_dir: The model folder.
        quick: Use the quick probe sizes.
        trims: Include the trim cells.
        only: Cell keys to keep (``kv:4:64``, ``trim:splice``, or the control
            ``kv:16:64``); None keeps the whole grid.
        sizes: Probe sizes other than `QUICK`/`FULL` (the benchmark's).

    Raises:
        ModelLoadError: config.json cannot be read.
        ValueError: ``only`` names a cell that is not in the grid.
    """
    geometry = read_geometry(model_dir)
    cells = cell_grid.grid(
        preset_precisions(),
        head_dim=geometry.head_dim,
        trims=trims,
        preset_agings=preset_agings(),
    )
    if only is not None:
        # The 16-bit control compares full precision with itself: it must come out
        # 100 % / KL 0, which checks the check.
        cells = [cell_grid.CONTROL, *cells]
        known = {cell.key for cell in cells}
        unknown = [key for key in only if key not in known]
        if unknown:
            raise ValueError(
                f"unknown cell {unknown[0]!r}; this model's cells are "
                f"{', '.join(sorted(known))}"
            )
        cells = [cell for cell in cells if cell.key in only]
    profile = runtime_profile()
    act = profile.kv_dtype_bytes or profile.act_dtype_bytes
    per_token = {}
    for cell in cells:
        if cell.kind == KV:
            try:
                per_token[cell.key] = _bytes_per_token(geometry, cell, act)
            except ValueError:
                continue  # the check reports the group as unusable
    return CheckPlan(
        sizes=sizes or (QUICK if quick else FULL),
        cells=tuple(cells),
        bytes_per_token=per_token,
        max_context=geometry.max_position_embeddings,
        full_bytes_per_token=float(bytes_per_token(geometry, 16, 64, act)),
    )


def _bytes_per_token(geometry, cell: Cell, act: int | None) -> float:
    """A KV cell's cache bytes per token (aged: the average at the trained context)."""
    if not cell.aging:
        return float(bytes_per_token(geometry, cell.bits, cell.group_size, act))
    tokens = geometry.max_position_embeddings or AGED_BYTES_AT_TOKENS
    aging = cell.kv_settings.aging
    assert aging is not None, "an aged cell's settings carry its tiers"
    return aged_kv_bytes_at(geometry, tokens, aging, cell.group_size, act) / tokens
