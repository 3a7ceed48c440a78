"""Use a fast system BLAS for MLX on the Linux CPU backend: BLIS, else OpenBLAS.

The ``mlx[cpu]`` wheel links a slow reference BLAS; any optimized BLAS preloaded in its
place makes float32 matmuls ~50x faster (shared/NOTES-mlx.md). MLX sends every matmul to
``cblas_sgemm``, including the one-row matmuls of decoding, and there the libraries
differ (2 cores, a 151936x896 float32 lm_head): OpenBLAS 0.3.21 packs the whole matrix
and streams 6.5 GB/s, Debian's BLIS 0.9 reads it in place at 16.6 GB/s, the memory's
speed; on square GEMMs both reach ~200 GFLOP/s. So BLIS (Debian ``libblis4-pthread``)
comes first and OpenBLAS (``libopenblas0-pthread``) is the fallback.

BLIS's threads wait for each other by spinning: on a machine whose cores are busy with
other work, a 2-thread BLIS fell to 5 GFLOP/s where one thread kept 27-44 (load average
10 on 2 cores). It therefore gets one thread per core that was idle at start-up (at
least one), unless ``BLIS_NUM_THREADS`` is set.

Where BLIS's CPU detection falls back to its portable 'generic' kernels (a Zen 5 with
Debian's BLIS 0.9: 36 GFLOP/s against 188 with its AVX-512 ones), `blis_arch` picks
the fastest sub-configuration by measurement and sets ``BLIS_ARCH_TYPE``.

The dynamic loader only honours ``LD_PRELOAD`` at process start, so the CLI
re-executes itself once with it set, before MLX is imported. ``SWAPLESS_NO_OPENBLAS=1``
(the historical name) turns the preload off.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

from app.cli.blas import blis_arch

BLIS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/blis-pthread/libblas.so.3",
    "/usr/lib/aarch64-linux-gnu/blis-pthread/libblas.so.3",
)
OPENBLAS_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libblas.so.3",
    "/usr/lib64/libopenblas.so.0",
)
NO_PRELOAD_ENV = "SWAPLESS_NO_OPENBLAS"


def find_blas() -> str | None:
    """Return the path of the system BLAS to preload in place of libblas, or None."""
    for candidate in (*BLIS_CANDIDATES, *OPENBLAS_CANDIDATES):
        if Path(candidate).is_file():
            return candidate
    return None


def find_openblas() -> str | None:
    """Return the path of a system OpenBLAS, or None (kept for callers and tests)."""
    for candidate in OPENBLAS_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    return None


def blas_name(path: str) -> str:
    """Return ``BLIS``, ``OpenBLAS`` or the file name of a preloaded BLAS library."""
    if "blis" in path.lower():
        return "BLIS"
    if "openblas" in path.lower():
        return "OpenBLAS"
    return Path(path).name


def idle_cores() -> int:
    """Cores this process may use that were not busy at start-up (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0]
    except OSError:
        busy = 0.0
    return max(1, min(cores, round(cores - busy)))


def preload_environment(library: str, env: dict[str, str]) -> dict[str, str]:
    """Return ``env`` with ``library`` preloaded (and BLIS's thread count chosen)."""
    env = dict(env)
    preload = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{library}:{preload}" if preload else library
    if blas_name(library) == "BLIS":
        if not env.get("BLIS_NUM_THREADS"):
            env["BLIS_NUM_THREADS"] = str(idle_cores())
        env = blis_arch.arch_environment(library, env)
    env[NO_PRELOAD_ENV] = "1"  # never loop, even if the preload fails
    return env


def reexec_with_openblas(argv: list[str]) -> None:
    """Re-execute this process with the fast BLAS preloaded, when useful; else return.

    Args:
        argv: The arguments after the program name.
    """
    if platform.system() != "Linux" or os.environ.get(NO_PRELOAD_ENV):
        return
    if "mlx" in sys.modules:
        return  # too late: the loader already resolved BLAS for this process
    preloaded = {
        blas_name(part): part
        for part in os.environ.get("LD_PRELOAD", "").split(":")
        if part and blas_name(part) in ("BLIS", "OpenBLAS")
    }
    if preloaded:
        # Preloaded by the caller (the Makefile): BLIS reads its thread count and
        # sub-configuration from the environment on its first call, still to come.
        if "BLIS" in preloaded:
            if not os.environ.get("BLIS_NUM_THREADS"):
                os.environ["BLIS_NUM_THREADS"] = str(idle_cores())
            chosen = blis_arch.arch_environment(preloaded["BLIS"], dict(os.environ))
            os.environ.update(chosen)
        return
    library = find_blas()
    if library is None:
        return
    env = preload_environment(library, dict(os.environ))
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
