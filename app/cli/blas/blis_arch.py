"""Pick BLIS's kernels by measurement where its CPU detection falls back to 'generic'.

BLIS chooses a sub-configuration (kernel set) from the CPU's vendor and family when it
starts. Debian's BLIS 0.9 knows AMD families up to Zen 3: on a Zen 5 EPYC (family
0x1A, AVX-512) it selects ``generic``, its portable reference kernels, and a float32
GEMM runs at 36 GFLOP/s on one thread where its ``skx`` (AVX-512) kernels reach 188 and
OpenBLAS 108 (2048x2048, measured 2026-12-02, shared/NOTES-mlx.md). Every prefill's
attention products and every float32 matmul of the app go through that GEMM.

BLIS takes a sub-configuration from ``BLIS_ARCH_TYPE``, as a number whose meaning
depends on the build (an unregistered one aborts the process, one the CPU cannot run
dies of an illegal instruction). So nothing is guessed: when the detection says
``generic``, each number is tried in a child process that multiplies two 384x384
matrices, and the fastest that runs is kept. The answer is cached per library file and
CPU (``~/.cache/swapless/blis-arch.json``), so the ~2 s of probes happen once. A
``BLIS_ARCH_TYPE`` the user set is never replaced.

Standard library only: the Makefile runs this file with the system Python
(``python3 app/cli/blas/blis_arch.py LIBRARY`` prints the number, or nothing) so that the
tests get the same kernels as the app before any venv exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

ARCH_ENV = "BLIS_ARCH_TYPE"
# Sub-configuration numbers tried: BLIS 0.9 registers 0-12 on x86-64, later versions
# add a few; an unregistered number aborts its child at once.
MAX_ID = 24
SIZE = 384
PROBE_TIMEOUT_S = 20.0
# The child: load BLIS, say which sub-configuration it runs (BLIS_ARCH_DEBUG prints it
# on stderr), then time one float32 GEMM, best of 5.
_PROBE = r"""
import ctypes, sys, time
lib = ctypes.CDLL(sys.argv[1])
n = int(sys.argv[2])
a = (ctypes.c_float * (n * n))(*([0.5] * (n * n)))
b = (ctypes.c_float * (n * n))(*([0.25] * (n * n)))
c = (ctypes.c_float * (n * n))()
one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
def gemm():
    lib.cblas_sgemm(101, 111, 111, n, n, n, one, a, n, b, n, zero, c, n)
gemm()
best = min(
    (lambda t: (gemm(), time.perf_counter() - t)[1])(time.perf_counter())
    for _ in range(5)
)
ok = abs(c[0] - 0.125 * n) < 1e-3 * n
print(2 * n**3 / best / 1e9 if ok else -1.0)
"""


@dataclass(frozen=True)
class Choice:
    """What was decided for one BLIS library on this CPU.

    Attributes:
        detected: The sub-configuration BLIS picks by itself.
        arch_id: The ``BLIS_ARCH_TYPE`` to set, or None to leave BLIS's own choice.
        name: The sub-configuration that number selects ('' when None).
        gflops: Its measured float32 GEMM rate (one thread, 384x384).
        detected_gflops: The rate of BLIS's own choice.
    """

    detected: str
    arch_id: int | None = None
    name: str = ""
    gflops: float = 0.0
    detected_gflops: float = 0.0

    def describe(self) -> str:
        """One line for the doctor and the bench's machine record."""
        if self.arch_id is None:
            return f"BLIS sub-configuration {self.detected!r} (its own detection)"
        return (
            f"BLIS sub-configuration {self.name!r} ({ARCH_ENV}={self.arch_id}; its "
            f"detection chose {self.detected!r}: {self.detected_gflops:.0f} against "
            f"{self.gflops:.0f} GFLOP/s measured)"
        )


def _probe(library: str, arch_id: int | None) -> tuple[str, float]:
    """(sub-configuration, GFLOP/s) in a child process; ('', -1) when it failed."""
    env = {k: v for k, v in os.environ.items() if k not in (ARCH_ENV, "LD_PRELOAD")}
    env.update(BLIS_ARCH_DEBUG="1", BLIS_NUM_THREADS="1")
    if arch_id is not None:
        env[ARCH_ENV] = str(arch_id)
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, library, str(SIZE)],
            capture_output=True,
            text=True,
            env=env,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "", -1.0
    name = ""
    for line in done.stderr.splitlines():
        if "selecting sub-configuration" in line and "'" in line:
            name = line.split("'")[1]
    try:
        rate = (
            float(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else -1
        )
    except (IndexError, ValueError):
        rate = -1.0
    return name, rate


def measure(library: str) -> Choice:
    """Ask BLIS what it detects; when 'generic', time every number and keep the best.

    Not in a frozen app: its executable is the app, not a Python that could run the
    probe (and the app started that way would probe again).
    """
    if getattr(sys, "frozen", False):
        return Choice(detected="not measured (frozen app)")
    detected, detected_rate = _probe(library, None)
    if detected != "generic":
        return Choice(detected=detected or "unknown", detected_gflops=detected_rate)
    best = Choice(detected=detected, detected_gflops=detected_rate)
    for arch_id in range(MAX_ID):
        name, rate = _probe(library, arch_id)
        if name and name != "generic" and rate > max(best.gflops, detected_rate):
            best = Choice(detected, arch_id, name, rate, detected_rate)
    return best


def _cpu_key() -> str:
    """The CPU's model and instruction-set flags (what BLIS's choice depends on)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return "unknown"
    wanted = ("vendor_id", "cpu family", "model", "model name", "flags")
    lines = sorted(
        {line for line in text.splitlines() if line.split(":")[0].strip() in wanted}
    )
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def cache_file() -> Path:
    """Where choices are kept (beside the native kernel's builds)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "swapless" / "blis-arch.json"


def _library_key(library: str) -> str:
    stat = Path(library).resolve().stat()
    return f"{Path(library).resolve()}|{stat.st_size}|{int(stat.st_mtime)}|{_cpu_key()}"


def choose(library: str) -> Choice:
    """The cached choice for ``library`` on this CPU, measured the first time."""
    key = _library_key(library)
    path = cache_file()
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if isinstance(known.get(key), dict):
        try:
            return Choice(**known[key])
        except TypeError:
            pass  # written by another version: measure again
    choice = measure(library)
    known[key] = asdict(choice)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{os.getpid()}")
        staging.write_text(json.dumps(known, indent=1))
        os.replace(staging, path)
    except OSError:
        pass  # unwritable cache: measured again next time, never a failure
    return choice


def arch_environment(library: str, env: dict[str, str]) -> dict[str, str]:
    """``env`` with ``BLIS_ARCH_TYPE`` set where measuring chose one (else unchanged)."""
    if env.get(ARCH_ENV) is not None:
        return env  # the user's
    try:
        choice = choose(library)
    except OSError:
        return env
    if choice.arch_id is None:
        return env
    return {**env, ARCH_ENV: str(choice.arch_id)}


def main(argv: list[str]) -> int:
    """Print the ``BLIS_ARCH_TYPE`` for the library named in ``argv`` (or nothing)."""
    if len(argv) != 1 or not Path(argv[0]).is_file():
        return 0  # no BLIS here: nothing to set, never an error for the Makefile
    chosen = arch_environment(argv[0], dict(os.environ)).get(ARCH_ENV)
    if chosen is not None:
        print(chosen)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
