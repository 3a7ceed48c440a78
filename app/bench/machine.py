"""Describe the machine a benchmark ran on: CPU, memory, OS, MLX build and BLAS.

Figures from different machines are not comparable; results.json carries this so a
reader can tell. The load average is recorded too: these machines are shared, and a
busy neighbour slows absolute times (the interleaved ratios are meant to cancel that).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

import psutil


def cpu_model() -> str:
    """Return the CPU's marketing name, or the architecture when it is unknown."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    if platform.system() == "Darwin":
        import subprocess

        try:
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
            )
            if out.stdout.strip():
                return out.stdout.strip()
        except OSError:
            pass
    return platform.processor() or platform.machine()


def openblas_preloaded() -> bool:
    """Return True when an OpenBLAS library is mapped into this process."""
    maps = Path("/proc/self/maps")
    if maps.is_file():
        try:
            return "openblas" in maps.read_text(errors="replace").lower()
        except OSError:
            pass
    return "openblas" in os.environ.get("LD_PRELOAD", "").lower()


def load_average() -> list[float] | None:
    """Return the 1/5/15-minute load averages, or None where unavailable."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_info() -> dict:
    """Return the machine, OS and MLX build as JSON-ready values."""
    import mlx.core as mx
    import mlx_lm

    from app.core.engine import backend

    memory = psutil.virtual_memory()
    return {
        "cpu": cpu_model(),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": int(memory.total),
        "memory_gib": round(memory.total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "mlx": getattr(mx, "__version__", "unknown"),
        "mlx_lm": getattr(mlx_lm, "__version__", "unknown"),
        "backend": backend.backend_name(),
        "openblas_preloaded": openblas_preloaded(),
        "load_average_at_start": load_average(),
    }


def short_description(info: dict) -> str:
    """Return one line like ``AMD EPYC, 2 cores, 23.4 GiB, Linux, mlx 0.32.4 (cpu)``."""
    blas = ", OpenBLAS" if info.get("openblas_preloaded") else ""
    system = info.get("os", "").split("-")[0]
    return (
        f"{info.get('cpu')}, {info.get('logical_cores')} cores, "
        f"{info.get('memory_gib')} GiB, {system}, mlx {info.get('mlx')} "
        f"({info.get('backend')}{blas}), mlx-lm {info.get('mlx_lm')}"
    )
