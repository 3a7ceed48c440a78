"""One reading of the machine's memory state, as a frozen value.

The probe produces these every half second; the UI draws them, the engine's policy reads
the pressure level, and the doctor prints one. Keeping it a plain frozen dataclass lets
all three work from the same value without sharing the probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class PressureLevel(Enum):
    """How close the machine is to paging, worst last."""

    NORMAL = "normal"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def severity(self) -> int:
        """0 for normal, 1 for warning, 2 for critical; for comparisons."""
        return _SEVERITY[self]

    @classmethod
    def worst(cls, levels: list[PressureLevel]) -> PressureLevel:
        """The most severe of ``levels`` (normal for an empty list)."""
        return max(levels, key=lambda level: level.severity, default=cls.NORMAL)


_SEVERITY = {
    PressureLevel.NORMAL: 0,
    PressureLevel.WARNING: 1,
    PressureLevel.CRITICAL: 2,
}


@dataclass(frozen=True)
class MemorySnapshot:
    """The machine's memory at one instant.

    Attributes:
        time: Wall-clock time of the sample (seconds since the epoch).
        total_bytes: Physical RAM.
        available_bytes: RAM available to new allocations without swapping.
        swap_total: Swap space configured (0 when there is none).
        swap_used: Swap in use.
        swap_in_rate: Bytes/s swapped in since the previous sample (0 on the first).
        swap_out_rate: Bytes/s swapped out since the previous sample (0 on the first).
        pressure: The pressure level.
        pressure_source: What the level was based on, readable by a person.
        psi_some_avg10: Linux PSI ``some avg10`` (percent of time), when available.
        psi_full_avg10: Linux PSI ``full avg10`` (percent of time), when available.
        process_rss: Resident memory of this process.
        mlx_active: MLX active memory, when the engine provides it.
        mlx_cache: MLX buffer-cache memory, when the engine provides it.
        mlx_peak: MLX peak memory, when the engine provides it.
        kv_bytes: Bytes held by the current KV cache, when the engine provides it.
        pressure_signals: The signals the level was decided from
            (`pressure.PressureSignal`), so the window can say in words what is wrong.
    """

    time: float
    total_bytes: int
    available_bytes: int
    swap_total: int
    swap_used: int
    swap_in_rate: float
    swap_out_rate: float
    pressure: PressureLevel
    pressure_source: str
    psi_some_avg10: float | None = None
    psi_full_avg10: float | None = None
    process_rss: int = 0
    mlx_active: int | None = None
    mlx_cache: int | None = None
    mlx_peak: int | None = None
    kv_bytes: int | None = None
    pressure_signals: tuple = ()

    @property
    def available_fraction(self) -> float:
        """Available memory as a fraction of the total."""
        return self.available_bytes / self.total_bytes if self.total_bytes else 0.0
