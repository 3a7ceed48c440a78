"""Memory pressure in plain words, for the window's notice area.

The level itself is decided by `pressure.pressure_signals` (the probe stores the signals
in each `MemorySnapshot`); this module only says, in words a user knows, which signal
raised it and what Swapless does about it. Figures are kept where they help ("1.2 GiB of
16 GiB free"), jargon is not ("PSI avg10"), and memory is only called low when free
memory is what raised the level: a stall with 94 % of memory free is not "tight".
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.memory.pressure import PressureSignal
from app.core.memory.snapshot import MemorySnapshot, PressureLevel
from app.core.text.display_numbers import format_bytes

# What Swapless does at each level (see `trim.policy` and `ConversationSession.send`).
WHAT_SWAPLESS_DOES = {
    PressureLevel.WARNING: (
        "Swapless now trims conversations earlier and frees cached prompts it can "
        "rebuild. Closing other apps helps."
    ),
    PressureLevel.CRITICAL: (
        "Swapless will not start reading a new prompt until this eases, and frees what "
        "it can rebuild. Close other apps or wait a moment, then send again."
    ),
}


@dataclass(frozen=True)
class PressureNotice:
    """What to tell the user about memory pressure.

    Attributes:
        level: The level from the snapshot.
        text: One or two plain sentences: what is wrong, then what Swapless does.
    """

    level: PressureLevel
    text: str


def pressure_notice(snapshot: MemorySnapshot) -> PressureNotice | None:
    """Words for the snapshot's pressure, or None when it is normal."""
    level = snapshot.pressure
    if level is PressureLevel.NORMAL:
        return None
    raised = [
        s for s in snapshot.pressure_signals if s.level.severity >= level.severity
    ]
    causes = [_cause(signal, snapshot) for signal in raised] or [
        "The system reports memory pressure."
    ]
    return PressureNotice(level, " ".join([*causes, WHAT_SWAPLESS_DOES[level]]))


def _cause(signal: PressureSignal, snapshot: MemorySnapshot) -> str:
    if signal.kind == "available":
        return (
            f"Memory is running low: {format_bytes(snapshot.available_bytes)} of "
            f"{format_bytes(snapshot.total_bytes)} free."
        )
    if signal.kind == "psi":
        return (
            f"Programs had to wait for memory {signal.value:.0f}% of the time in the "
            "last 10 seconds."
        )
    if signal.kind == "swap":
        return f"The system is moving memory to disk ({format_bytes(signal.value)}/s)."
    if signal.kind == "macos":
        return "macOS reports that memory is under pressure."
    return "The system reports memory pressure."
