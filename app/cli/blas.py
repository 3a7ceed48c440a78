"""Use the system OpenBLAS for MLX on the Linux CPU backend.

The ``mlx[cpu]`` wheel links a slow reference BLAS; with Debian's OpenBLAS preloaded a
float32 matmul runs ~50× faster (shared/NOTES-mlx.md). The dynamic loader only honours
``LD_PRELOAD`` at process start, so the CLI re-executes itself once with it set, before
MLX is imported. ``SWAPLESS_NO_OPENBLAS=1`` turns this off.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib64/libopenblas.so.0",
)


def find_openblas() -> str | None:
    """Return the path of a system OpenBLAS that can stand in for libblas, or None."""
    for candidate in OPENBLAS_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    return None


def reexec_with_openblas(argv: list[str]) -> None:
    """Re-execute this process with OpenBLAS preloaded, when useful; else return.

    Args:
        argv: The arguments after the program name.
    """
    if platform.system() != "Linux" or os.environ.get("SWAPLESS_NO_OPENBLAS"):
        return
    if "mlx" in sys.modules:
        return  # too late: the loader already resolved BLAS for this process
    library = find_openblas()
    preload = os.environ.get("LD_PRELOAD", "")
    if library is None or library in preload.split(":"):
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = f"{library}:{preload}" if preload else library
    env["SWAPLESS_NO_OPENBLAS"] = "1"  # never loop, even if the preload fails
    if getattr(sys, "frozen", False):
        command = [sys.executable, *argv]
    else:
        command = [sys.executable, "-m", "app", *argv]
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        os.execve(sys.executable, command, env)
    except OSError:
        return  # keep running with the slow BLAS rather than fail to start
