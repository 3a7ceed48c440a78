"""MemoryProbe on this machine: behaviour only, no timing assertions."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from app.core.memory import probe as probe_module
from app.core.memory.macos import MacPressureReader
from app.core.memory.probe import MemoryProbe
from app.core.memory.snapshot import PressureLevel


def psi_file(tmp_path, some: float, full: float):
    path = tmp_path / "memory"
    path.write_text(
        f"some avg10={some:.2f} avg60=0.00 avg300=0.00 total=1\n"
        f"full avg10={full:.2f} avg60=0.00 avg300=0.00 total=1\n"
    )
    return path


def test_fields_are_sane(tmp_path):
    before = time.time()
    snap = MemoryProbe(psi_path=psi_file(tmp_path, 0, 0), platform="linux").sample()
    assert before <= snap.time <= time.time()
    assert 0 < snap.available_bytes <= snap.total_bytes
    assert 0 <= snap.swap_used <= max(snap.swap_total, snap.swap_used)
    assert snap.swap_in_rate == snap.swap_out_rate == 0.0  # first sample
    assert snap.process_rss > 0
    assert isinstance(snap.pressure, PressureLevel)
    assert snap.mlx_active is snap.kv_bytes is None
    assert 0 < snap.available_fraction <= 1


def test_second_sample_has_non_negative_swap_rates():
    probe = MemoryProbe()
    probe.sample()
    snap = probe.sample()
    assert snap.swap_in_rate >= 0 and snap.swap_out_rate >= 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux PSI")
def test_real_psi_is_read_on_linux():
    snap = MemoryProbe().sample()
    if snap.psi_some_avg10 is None:
        pytest.skip("this kernel has no PSI")
    assert snap.pressure_source.startswith("Linux PSI some avg10=")
    assert "available memory" in snap.pressure_source


def test_level_follows_injected_psi(tmp_path):
    snap = MemoryProbe(psi_path=psi_file(tmp_path, 12.5, 0), platform="linux").sample()
    assert (snap.psi_some_avg10, snap.psi_full_avg10) == (12.5, 0.0)
    # Warning at least: the machine's own available memory could only make it worse.
    assert snap.pressure.severity >= PressureLevel.WARNING.severity
    assert "some avg10=12.50 full avg10=0.00 [warning]" in snap.pressure_source

    snap = MemoryProbe(psi_path=psi_file(tmp_path, 50, 25), platform="linux").sample()
    assert snap.pressure is PressureLevel.CRITICAL
    assert "[critical]" in snap.pressure_source


def test_missing_psi_falls_back_to_available_memory(tmp_path):
    missing = tmp_path / "no-such-file"
    snap = MemoryProbe(psi_path=missing, platform="linux").sample()
    assert snap.psi_some_avg10 is None and snap.psi_full_avg10 is None
    assert snap.pressure_source.startswith(
        f"no PSI ({missing} absent) + available memory"
    )


def test_garbled_psi_falls_back(tmp_path):
    path = tmp_path / "memory"
    path.write_text("nonsense\n")
    snap = MemoryProbe(psi_path=path, platform="linux").sample()
    assert snap.psi_some_avg10 is None
    assert "unreadable" in snap.pressure_source


class FakeMacReader(MacPressureReader):
    def __init__(self, level):
        super().__init__(libc=None, platform="test")
        self.level = level

    def read(self):
        return self.level


def test_macos_uses_the_kernel_level_and_skips_psi(tmp_path):
    probe = MemoryProbe(
        psi_path=psi_file(tmp_path, 90, 90),
        platform="darwin",
        mac_reader=FakeMacReader(2),
    )
    snap = probe.sample()
    assert snap.psi_some_avg10 is None  # PSI is Linux-only
    assert snap.pressure.severity >= PressureLevel.WARNING.severity
    assert snap.pressure_source.startswith("macOS memorystatus level 2 [warning]")


def test_other_platforms_use_available_memory_only():
    snap = MemoryProbe(platform="win32").sample()
    assert snap.pressure_source.startswith("available memory")


def test_injected_mlx_and_kv_numbers():
    probe = MemoryProbe(mlx_stats=lambda: (100, 200, 300), kv_bytes=lambda: 4096)
    snap = probe.sample()
    assert (snap.mlx_active, snap.mlx_cache, snap.mlx_peak, snap.kv_bytes) == (
        100,
        200,
        300,
        4096,
    )


def test_swap_rates_are_computed_between_samples(monkeypatch, tmp_path):
    counters = iter([(0, 0), (1 << 20, 32 << 20)])
    clock = iter([10.0, 12.0])

    def fake_swap():
        sin, sout = next(counters)
        return SimpleNamespace(total=8 << 30, used=1 << 30, sin=sin, sout=sout)

    monkeypatch.setattr(probe_module.psutil, "swap_memory", fake_swap)
    probe = MemoryProbe(
        psi_path=psi_file(tmp_path, 0, 0), platform="linux", clock=lambda: next(clock)
    )
    assert probe.sample().swap_out_rate == 0.0
    snap = probe.sample()
    assert snap.swap_in_rate == 512 * 1024  # 1 MiB over 2 s
    assert snap.swap_out_rate == 16 << 20
    assert snap.pressure is PressureLevel.CRITICAL
    assert "swap in 512 KiB/s out 16.0 MiB/s [critical]" in snap.pressure_source


def test_core_modules_import_neither_mlx_nor_qt():
    code = (
        "import sys\n"
        "import app.core.doctor.doctor, app.core.memory.probe, app.core.budget.memory_budget\n"
        "import app.core.budget.weights\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm', 'PySide6')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
