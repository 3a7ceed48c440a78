"""Building the native quantized kernel (``native/``) into a private cache folder.

The kernel is an MLX C++ extension (a ``Primitive`` with ``eval_cpu``) compiled with
CMake against the installed MLX wheel and nanobind. It is optional: ``make native`` (or
``python -m app.core.engine.cpu.native_build``) builds it, and without a compiler,
CMake or nanobind the engine keeps dequantizing to float32. The build is keyed by the
sources and the MLX, nanobind and Python versions, since MLX's C++ API and nanobind's
internals key change between releases: a stale build is never loaded.

This module does not import MLX, so `swapless doctor` can report the kernel's state.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "native"
MODULE_NAME = "_swapless_qmm"
CACHE_ENV = "SWAPLESS_NATIVE_CACHE"
"""Overrides the cache folder (tests point it at a temporary one)."""
DISABLE_ENV = "SWAPLESS_NATIVE_KERNEL"
"""Set to ``0`` to keep the float32 path even when the kernel is built."""


@dataclass(frozen=True)
class BuildState:
    """Whether the kernel is built for this installation.

    Attributes:
        path: The built module, or None.
        reason: Why it is not built (or what was built), one line.
    """

    path: Path | None
    reason: str


def disabled() -> bool:
    """Whether the user switched the kernel off (``SWAPLESS_NATIVE_KERNEL=0``)."""
    return os.environ.get(DISABLE_ENV, "").strip() in {"0", "off", "false", "no"}


def cache_root() -> Path:
    """The folder holding built kernels, one sub-folder per build key."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "swapless" / "native"


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def build_key() -> str:
    """A digest of everything the built module depends on."""
    digest = hashlib.sha256()
    for path in sorted(SOURCE_DIR.iterdir()):
        if path.suffix in {".cpp", ".h", ".txt"}:
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    for part in (
        _version("mlx"),
        _version("nanobind"),
        sys.version,
        platform.machine(),
        sys.platform,
    ):
        digest.update(part.encode())
    return digest.hexdigest()[:16]


def _module_file(folder: Path) -> Path | None:
    found = sorted(folder.glob(f"{MODULE_NAME}*.so")) + sorted(
        folder.glob(f"{MODULE_NAME}*.pyd")
    )
    return found[0] if found else None


def state() -> BuildState:
    """Whether a kernel built from these sources for these versions exists."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return BuildState(None, "not used on Apple Silicon (Metal has its own kernels)")
    folder = cache_root() / build_key()
    path = _module_file(folder) if folder.is_dir() else None
    if path is None:
        return BuildState(None, "not built (run `make native`)")
    return BuildState(path, f"built at {path}")


def missing_tools() -> list[str]:
    """The build tools this machine lacks."""
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if not any(shutil.which(cc) for cc in ("c++", "g++", "clang++")):
        missing.append("a C++ compiler")
    if _version("nanobind") == "absent":
        missing.append("nanobind (pip install nanobind)")
    return missing


def build(*, quiet: bool = True) -> BuildState:
    """Build the kernel unless it is built already.

    Args:
        quiet: Keep CMake's output unless the build fails.

    Returns:
        The state after the attempt: a path, or the one-line reason it failed.
    """
    current = state()
    if current.path is not None or "Apple Silicon" in current.reason:
        return current
    missing = missing_tools()
    if missing:
        return BuildState(None, "cannot build: missing " + ", ".join(missing))
    target = cache_root() / build_key()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="build-") as scratch:
        work = Path(scratch)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        steps = [
            [
                "cmake",
                *generator,
                f"-DPython_EXECUTABLE={sys.executable}",
                "-DCMAKE_BUILD_TYPE=Release",
                "-S",
                str(SOURCE_DIR),
                "-B",
                str(work / "build"),
            ],
            ["cmake", "--build", str(work / "build"), "-j", "1"],
        ]
        for step in steps:
            done = subprocess.run(
                step,
                capture_output=quiet,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                tail = (done.stderr or done.stdout or "").strip().splitlines()[-3:]
                return BuildState(None, f"build failed ({' / '.join(tail) or step[0]})")
        built = _module_file(work / "build")
        if built is None:
            return BuildState(None, "build produced no module")
        staging = work / "out"
        staging.mkdir()
        shutil.copy2(built, staging / built.name)
        # A rename is atomic: a concurrent reader sees no half-copied module.
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    return state()


def main() -> int:
    """Build the kernel, printing one line; exit 1 when it could not be built."""
    if state().path is None:
        print("Building the native quantized kernel (minutes)...", flush=True)
    result = build(quiet=False)
    print(result.reason if result.path is None else f"Native kernel {result.reason}")
    return 0 if result.path is not None else 1


if __name__ == "__main__":
    sys.exit(main())
