"""Memory pressure in plain words: the signal that raised the level, no jargon."""

from __future__ import annotations

import pytest

from app.core.memory.pressure import PsiReading, pressure_signals, worst_level
from app.core.memory.pressure_words import pressure_notice
from app.core.memory.snapshot import MemorySnapshot, PressureLevel

GIB = 1024**3
JARGON = ("PSI", "avg10", "memorystatus", "[warning]", "[critical]")


def _snapshot(available_fraction: float, **readings) -> MemorySnapshot:
    signals = pressure_signals(available_fraction=available_fraction, **readings)
    return MemorySnapshot(
        time=0.0,
        total_bytes=16 * GIB,
        available_bytes=int(16 * GIB * available_fraction),
        swap_total=readings.get("swap_total", 0),
        swap_used=0,
        swap_in_rate=readings.get("swap_in_rate", 0.0),
        swap_out_rate=readings.get("swap_out_rate", 0.0),
        pressure=worst_level(signals),
        pressure_source="",
        pressure_signals=tuple(signals),
    )


def test_normal_pressure_needs_no_notice():
    assert pressure_notice(_snapshot(0.6, psi=PsiReading(0.5, 0.0))) is None


def test_a_stall_with_plenty_free_is_not_called_low_memory():
    notice = pressure_notice(_snapshot(0.94, psi=PsiReading(25.0, 1.0)))
    assert notice.level is PressureLevel.WARNING
    assert "wait for memory 25% of the time" in notice.text
    assert "low" not in notice.text and "tight" not in notice.text
    assert "trims conversations earlier" in notice.text
    assert not any(word in notice.text for word in JARGON)


@pytest.mark.parametrize(
    ("fraction", "level", "does"),
    [(0.08, PressureLevel.WARNING, "earlier"), (0.03, PressureLevel.CRITICAL, "not")],
)
def test_low_free_memory_says_how_much_is_free(fraction, level, does):
    notice = pressure_notice(_snapshot(fraction, psi=PsiReading(0.0, 0.0)))
    assert notice.level is level
    assert notice.text.startswith("Memory is running low: ")
    assert "of 16.0 GiB free" in notice.text and does in notice.text
    assert not any(word in notice.text for word in JARGON)


def test_swapping_is_said_with_its_rate():
    snapshot = _snapshot(
        0.5, swap_total=GIB, swap_in_rate=0.0, swap_out_rate=32 * 1024 * 1024
    )
    notice = pressure_notice(snapshot)
    assert notice.level is PressureLevel.CRITICAL
    assert "moving memory to disk (32.0 MiB/s)" in notice.text
