"""Describe the machine a benchmark ran on: CPU, memory, OS, MLX build and BLAS.

Figures from different machines are not comparable; results.json carries this so a
reader can tell. The load average is recorded too: these machines are shared, and a
busy neighbour slows absolute times (the interleaved ratios are meant to cancel that).
"""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path

import psutil

from app.cli.blas import blis_arch


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


def blas_in_use() -> str | None:
    """Return ``BLIS`` or ``OpenBLAS`` when one is mapped into this process, else None.

    None means MLX's bundled reference BLAS (or an unknown one) does the matmuls.
    """
    text = os.environ.get("LD_PRELOAD", "")
    maps = Path("/proc/self/maps")
    if maps.is_file():
        with contextlib.suppress(OSError):
            text = maps.read_text(errors="replace")
    text = text.lower()
    if "blis" in text:
        return "BLIS"
    if "openblas" in text:
        return "OpenBLAS"
    return None


def openblas_preloaded() -> bool:
    """Return True when an optimized BLAS (BLIS or OpenBLAS) is mapped into this process.

    The historical name stays in results.json; `blas_in_use` says which one.
    """
    return blas_in_use() is not None


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

    from app.core.engine.cpu import backend

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
        "blas": blas_in_use(),
        "blas_threads": os.environ.get("BLIS_NUM_THREADS")
        if blas_in_use() == "BLIS"
        else os.environ.get("OPENBLAS_NUM_THREADS"),
        "blis_arch_type": os.environ.get("BLIS_ARCH_TYPE")
        if blas_in_use() == "BLIS"
        else None,
        "load_average_at_start": load_average(),
    }


def short_description(info: dict) -> str:
    """Return one line like ``AMD EPYC, 2 cores, 23.4 GiB, Linux, mlx 0.32.4 (cpu)``."""
    name = info.get("blas") or ("OpenBLAS" if info.get("openblas_preloaded") else None)
    if name == "BLIS" and info.get("blis_arch_type") is not None:
        name += f" {blis_arch.ARCH_ENV}={info['blis_arch_type']}"
    blas = f", {name}" if name else ""
    system = info.get("os", "").split("-")[0]
    return (
        f"{info.get('cpu')}, {info.get('logical_cores')} cores, "
        f"{info.get('memory_gib')} GiB, {system}, mlx {info.get('mlx')} "
        f"({info.get('backend')}{blas}), mlx-lm {info.get('mlx_lm')}"
    )
