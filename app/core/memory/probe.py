"""A cheap, thin adapter from the operating system's memory counters to `MemorySnapshot`.

The UI samples every 500 ms and the engine may sample before each cache extension, so
a sample must cost well under a millisecond: it reads psutil's counters, one small
``/proc`` file for PSI on Linux, and one sysctl on macOS, and nothing else. MLX's own
counters and the KV cache size come from callables the engine injects, so this module
never imports MLX. All interpretation is in `pressure.pressure_signals`, which is pure.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from app.core.memory.macos import MacPressureReader
from app.core.memory.pressure import (
    PsiReading,
    describe_signals,
    parse_psi,
    pressure_signals,
    worst_level,
)
from app.core.memory.snapshot import MemorySnapshot

DEFAULT_PSI_PATH = Path("/proc/pressure/memory")

MlxStats = Callable[[], tuple[int, int, int]]
"""Returns MLX (active, cache, peak) memory in bytes."""


class MemoryProbe:
    """Takes `MemorySnapshot`s of this machine.

    Swap rates are computed between consecutive samples of the same probe, so keep one
    probe per sampler (e.g. one per UI timer).
    """

    def __init__(
        self,
        mlx_stats: MlxStats | None = None,
        kv_bytes: Callable[[], int] | None = None,
        *,
        psi_path: Path = DEFAULT_PSI_PATH,
        platform: str = sys.platform,
        mac_reader: MacPressureReader | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        """Set up the probe.

        Args:
            mlx_stats: Returns MLX (active, cache, peak) bytes; injected by the engine.
            kv_bytes: Returns the bytes held by the current KV cache.
            psi_path: The Linux PSI file; tests point it elsewhere.
            platform: ``sys.platform``, injectable for tests.
            mac_reader: Reader of the macOS pressure level (default: the real one on
                macOS).
            clock: Monotonic clock for the swap rates.
        """
        self._mlx_stats = mlx_stats
        self._kv_bytes = kv_bytes
        self._psi_path = Path(psi_path)
        self._is_linux = platform.startswith("linux")
        self._mac = mac_reader or MacPressureReader(platform=platform)
        self._clock = clock
        self._process = psutil.Process()
        self._last_swap: tuple[float, int, int] | None = None

    def sample(self) -> MemorySnapshot:
        """Read the memory state now.

        Returns:
            A new snapshot. Swap rates are 0 on the first sample of this probe.
        """
        now = self._clock()
        vm = psutil.virtual_memory()
        swap = psutil.swap_memory()
        swap_in_rate, swap_out_rate = self._swap_rates(now, swap.sin, swap.sout)
        psi, psi_missing = self._read_psi() if self._is_linux else (None, None)
        available_fraction = vm.available / vm.total if vm.total else 0.0
        signals = pressure_signals(
            available_fraction=available_fraction,
            psi=psi,
            psi_missing_reason=psi_missing,
            macos_level=self._mac.read(),
            swap_total=swap.total,
            swap_in_rate=swap_in_rate,
            swap_out_rate=swap_out_rate,
        )
        active = cache = peak = None
        if self._mlx_stats is not None:
            active, cache, peak = self._mlx_stats()
        return MemorySnapshot(
            time=time.time(),
            total_bytes=vm.total,
            available_bytes=vm.available,
            swap_total=swap.total,
            swap_used=swap.used,
            swap_in_rate=swap_in_rate,
            swap_out_rate=swap_out_rate,
            pressure=worst_level(signals),
            pressure_source=describe_signals(signals),
            pressure_signals=tuple(signals),
            psi_some_avg10=psi.some_avg10 if psi else None,
            psi_full_avg10=psi.full_avg10 if psi else None,
            process_rss=self._process.memory_info().rss,
            mlx_active=active,
            mlx_cache=cache,
            mlx_peak=peak,
            kv_bytes=self._kv_bytes() if self._kv_bytes is not None else None,
        )

    def _swap_rates(self, now: float, sin: int, sout: int) -> tuple[float, float]:
        last, self._last_swap = self._last_swap, (now, sin, sout)
        if last is None or now <= last[0]:
            return 0.0, 0.0
        elapsed = now - last[0]
        # Counters only grow, but clamp in case the OS resets them.
        return max(0.0, (sin - last[1]) / elapsed), max(0.0, (sout - last[2]) / elapsed)

    def _read_psi(self) -> tuple[PsiReading | None, str | None]:
        try:
            text = self._psi_path.read_text(encoding="ascii")
        except FileNotFoundError:
            return None, f"no PSI ({self._psi_path} absent)"
        except OSError as exc:
            # PermissionError, or EOPNOTSUPP on kernels booted with psi=0.
            return None, f"no PSI ({self._psi_path}: {exc.strerror or exc})"
        try:
            return parse_psi(text), None
        except ValueError:
            return None, f"no PSI ({self._psi_path} unreadable)"
