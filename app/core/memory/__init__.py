"""The memory probe: how close the machine is to swapping, sampled cheaply and often.

`MemoryProbe.sample()` returns a frozen `MemorySnapshot` (RAM, swap traffic, process
RSS, MLX counters injected by the engine, and a `PressureLevel` with the signals it was
based on). The level itself is decided by the pure `pressure.classify_pressure`.
"""

from app.core.memory.probe import MemoryProbe
from app.core.memory.snapshot import MemorySnapshot, PressureLevel

__all__ = ["MemoryProbe", "MemorySnapshot", "PressureLevel"]
