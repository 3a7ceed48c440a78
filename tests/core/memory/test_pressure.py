"""The pure pressure classification, fed warning and critical inputs."""

from __future__ import annotations

import pytest

from app.core.memory.pressure import (
    AVAILABLE_CRITICAL_FRACTION,
    AVAILABLE_WARNING_FRACTION,
    SWAP_CRITICAL_RATE,
    SWAP_WARNING_RATE,
    PsiReading,
    classify_pressure,
    parse_psi,
)
from app.core.memory.snapshot import PressureLevel

NORMAL, WARNING, CRITICAL = (
    PressureLevel.NORMAL,
    PressureLevel.WARNING,
    PressureLevel.CRITICAL,
)
QUIET = PsiReading(0.0, 0.0)


def test_parse_psi():
    text = (
        "some avg10=12.34 avg60=1.00 avg300=0.50 total=123456\n"
        "full avg10=3.21 avg60=0.10 avg300=0.00 total=999\n"
    )
    assert parse_psi(text) == PsiReading(12.34, 3.21)
    assert parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n") == PsiReading(
        0.0, None
    )
    with pytest.raises(ValueError):
        parse_psi("garbage")


def test_normal_machine_reads_like_the_documented_example():
    level, source = classify_pressure(available_fraction=0.93, psi=QUIET)
    assert level is NORMAL
    assert source == "Linux PSI some avg10=0.00 full avg10=0.00 + available memory 93%"


@pytest.mark.parametrize(
    ("psi", "expected"),
    [
        (PsiReading(9.99, 0.0), NORMAL),
        (PsiReading(10.0, 0.0), WARNING),
        (PsiReading(0.0, 5.0), WARNING),
        (PsiReading(40.0, 0.0), CRITICAL),
        (PsiReading(15.0, 20.0), CRITICAL),
        (PsiReading(12.0, None), WARNING),
    ],
)
def test_psi_thresholds(psi, expected):
    level, source = classify_pressure(available_fraction=0.9, psi=psi)
    assert level is expected
    if expected is not NORMAL:
        assert f"[{expected.value}]" in source


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (AVAILABLE_WARNING_FRACTION, NORMAL),
        (AVAILABLE_WARNING_FRACTION - 0.01, WARNING),
        (AVAILABLE_CRITICAL_FRACTION - 0.01, CRITICAL),
    ],
)
def test_available_memory_thresholds(fraction, expected):
    level, _ = classify_pressure(available_fraction=fraction, psi=QUIET)
    assert level is expected


@pytest.mark.parametrize(
    ("swap_in", "swap_out", "expected"),
    [
        (0, 0, NORMAL),
        (0, SWAP_WARNING_RATE, WARNING),
        (SWAP_CRITICAL_RATE, 0, CRITICAL),
    ],
)
def test_swap_traffic(swap_in, swap_out, expected):
    level, source = classify_pressure(
        available_fraction=0.9,
        swap_total=1 << 30,
        swap_in_rate=swap_in,
        swap_out_rate=swap_out,
    )
    assert level is expected
    assert "swap in" in source


def test_the_worst_signal_wins():
    level, source = classify_pressure(
        available_fraction=0.03, psi=PsiReading(11.0, 0.0)
    )
    assert level is CRITICAL
    assert "[warning]" in source and "available memory 3% [critical]" in source


def test_missing_psi_falls_back_and_says_so():
    level, source = classify_pressure(
        available_fraction=0.5,
        psi_missing_reason="no PSI (/proc/pressure/memory absent)",
    )
    assert level is NORMAL
    assert source == "no PSI (/proc/pressure/memory absent) + available memory 50%"


@pytest.mark.parametrize(
    ("sysctl", "expected"), [(1, NORMAL), (2, WARNING), (4, CRITICAL)]
)
def test_macos_kernel_level_replaces_the_available_heuristic(sysctl, expected):
    # macOS keeps memory full of cache; a low "available" alone must not alarm.
    level, source = classify_pressure(available_fraction=0.02, macos_level=sysctl)
    assert level is expected
    assert source.startswith(f"macOS memorystatus level {sysctl}")
    assert "available" not in source


def test_unexpected_macos_value_falls_back_to_available_memory():
    level, source = classify_pressure(available_fraction=0.5, macos_level=0)
    assert level is NORMAL
    assert source == "available memory 50%"


def test_levels_order():
    assert PressureLevel.worst([NORMAL, CRITICAL, WARNING]) is CRITICAL
    assert PressureLevel.worst([]) is NORMAL
