"""Building the native quantized kernel (``native/``) into a private cache folder.

The kernel is an MLX C++ extension (a ``Primitive`` with ``eval_cpu``) compiled with
CMake against the installed MLX wheel and nanobind. It is optional: ``make native`` (or
``python -m app.core.engine.cpu.native_build``) builds it, and without a compiler,
CMake or nanobind the engine keeps dequantizing to float32. The build is keyed by the
sources and the MLX, nanobind and Python versions, since MLX's C++ API and nanobind's
internals key change between releases: a stale build is never loaded.

The normal setup builds it too, best effort: the Makefile's venv step runs
``python -m app.core.engine.cpu.native_build --best-effort``, which prints one line and
never fails; a failed build leaves its reason in ``<cache>/<key>.failed`` for
`swapless doctor`, and is not retried by the best-effort step until the sources or
versions change (``make native`` retries). A frozen app carries the module its
packager built (`bundled_module`) and uses that one.

This module does not import MLX, so `swapless doctor` and the memory budget can know
the kernel's state.
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
SUPPORTED = frozenset({(4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)})
"""(bits, group) pairs of affine quantization the kernel computes; the budget reads
them too, to count what stays packed."""
BUNDLE_DIR = "swapless_native"
"""Folder of a frozen app (beside its Python modules) holding the bundled kernel."""
FAILED_SUFFIX = ".failed"
"""``<cache>/<key>.failed`` holds the one-line reason the last build of a key failed."""


@dataclass(frozen=True)
class BuildState:
    """Whether the kernel is built for this installation.

    Attributes:
        path: The built module, or None.
        reason: Why it is not built (or what was built), one line.
    """

    path: Path | None
    reason: str


DECODE_BLOCK_ENV = "SWAPLESS_DECODE_BLOCK"
"""Set to ``0`` to keep MLX's own operations around the kernels for a decode token
(`decode_block`); here so the doctor can read it without importing MLX."""
OFF_WORDS = frozenset({"0", "off", "false", "no"})


def disabled() -> bool:
    """Whether the user switched the kernel off (``SWAPLESS_NATIVE_KERNEL=0``)."""
    return os.environ.get(DISABLE_ENV, "").strip() in OFF_WORDS


def decode_block_disabled() -> bool:
    """Whether the user switched the decode block off (``SWAPLESS_DECODE_BLOCK=0``)."""
    return os.environ.get(DECODE_BLOCK_ENV, "").strip() in OFF_WORDS


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
    # A frozen app carries no sources (its kernel is bundled): the versions still count.
    sources = sorted(SOURCE_DIR.iterdir()) if SOURCE_DIR.is_dir() else []
    for path in sources:
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


def bundled_module() -> Path | None:
    """The kernel a frozen app carries (built with the app's own MLX), or None."""
    root = getattr(sys, "_MEIPASS", None)
    if not getattr(sys, "frozen", False) or root is None:
        return None
    folder = Path(root) / BUNDLE_DIR
    return _module_file(folder) if folder.is_dir() else None


def failure_file() -> Path:
    """Where a failed build of this key leaves its reason."""
    return cache_root() / (build_key() + FAILED_SUFFIX)


def recorded_failure() -> str | None:
    """The reason the last build of these sources and versions failed, if one did."""
    try:
        text = failure_file().read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text.splitlines()[0] if text else "build failed"


def state() -> BuildState:
    """Whether a kernel built from these sources for these versions exists.

    The reason says, when there is none, why: a recorded failed build, missing tools,
    or simply not built yet.
    """
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return BuildState(None, "not used on Apple Silicon (Metal has its own kernels)")
    if getattr(sys, "frozen", False):
        bundled = bundled_module()
        if bundled is None:
            return BuildState(None, "not bundled with this app")
        return BuildState(bundled, f"bundled with the app ({bundled.name})")
    folder = cache_root() / build_key()
    path = _module_file(folder) if folder.is_dir() else None
    if path is not None:
        return BuildState(path, f"built at {path}")
    failed = recorded_failure()
    if failed is not None:
        return BuildState(None, f"not built: {failed} (`make native` retries)")
    missing = missing_tools()
    if missing:
        return BuildState(None, "not built: missing " + ", ".join(missing))
    return BuildState(None, "not built (run `make native`)")


def available() -> bool:
    """Whether the engine will try the kernel: built (or bundled) and not switched off.

    Its self-test on the loaded layers still decides at load time; the budget counts
    the packed size only for models whose every quantized layer it covers.
    """
    return not disabled() and state().path is not None


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
    if (
        current.path is not None
        or "Apple Silicon" in current.reason
        or getattr(sys, "frozen", False)
    ):
        return current
    missing = missing_tools()
    if missing:
        return BuildState(None, "cannot build: missing " + ", ".join(missing))
    target = cache_root() / build_key()
    target.parent.mkdir(parents=True, exist_ok=True)
    result = _compile(target, quiet=quiet)
    _record(result)
    return result


def _record(result: BuildState) -> None:
    """Keep a failed build's reason for the doctor; forget it once a build succeeds."""
    path = failure_file()
    try:
        if result.path is None:
            path.write_text(result.reason + "\n", encoding="utf-8")
        else:
            path.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only cache: the doctor then says "not built" without the why


def _compile(target: Path, *, quiet: bool) -> BuildState:
    """Configure and build into a scratch folder, then move the module to ``target``."""
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


def main(argv: list[str] | None = None) -> int:
    """Build the kernel and say how it went.

    ``--best-effort`` (the Makefile's setup step): build quietly, print one line, exit
    0 whatever happens, and skip a build that already failed for these sources and
    versions (its reason stays for the doctor). Otherwise (``make native``): show the
    build's output, retry a failed one, and exit 1 when it could not be built.
    """
    args = sys.argv[1:] if argv is None else argv
    best_effort = "--best-effort" in args
    if best_effort:
        try:
            current = state()
            failed = recorded_failure()
            if current.path is None and failed is None:
                print(
                    "Building the optional native quantized kernel (minutes; "
                    "docs/native-kernel.md)...",
                    flush=True,
                )
                current = build(quiet=True)
            elif current.path is None:
                current = BuildState(None, f"{failed} (not retried: `make native`)")
        except Exception as exc:  # never fail the setup over an optional part
            current = BuildState(None, f"build failed ({type(exc).__name__}: {exc})")
        print(f"Native quantized kernel: {current.reason}", flush=True)
        return 0
    if state().path is None:
        print("Building the native quantized kernel (minutes)...", flush=True)
    result = build(quiet=False)
    print(result.reason if result.path is None else f"Native kernel {result.reason}")
    return 0 if result.path is not None else 1


if __name__ == "__main__":
    sys.exit(main())
