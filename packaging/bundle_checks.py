"""Checks of a built bundle that fail the build instead of the user's first launch.

* macOS: MLX loads its Metal kernels from ``mlx.metallib`` *beside the libmlx.dylib
  that was loaded* (it asks the loader for its own path). If PyInstaller ever places
  or links libmlx.dylib somewhere without the metallib next to it, every GPU operation
  fails at run time. `metallib_problems` finds such places; `link_missing_metallibs`
  repairs them with relative symlinks (codesign-safe, inside the bundle).
* Linux: the ``mlx[cpu]`` wheel's libmlx.so finds its BLAS/LAPACK/gfortran in
  ``mlx_cpu.libs`` through an ``$ORIGIN`` rpath. `ldd_problems` reads ``ldd`` output
  and reports libraries that are missing or resolved from outside the bundle.

Everything here is plain path and text handling, tested on any platform.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

LIBMLX_NAMES = ("libmlx.dylib",)
METALLIB = "mlx.metallib"

# Libraries every Linux desktop has; anything else libmlx needs must come from the
# bundle, or the package works only on machines that happen to have it.
SYSTEM_LIBRARIES = re.compile(
    r"^(linux-vdso|ld-linux[-\w]*|libc|libm|libdl|libpthread|librt|libstdc\+\+|"
    r"libgcc_s)\.so"
)

_LDD_LINE = re.compile(r"^\s*(\S+)\s*(?:=>\s*(.*?))?\s*(?:\(0x[0-9a-f]+\))?\s*$")


def libmlx_locations(bundle: Path) -> list[Path]:
    """Return every path (file or symlink) under ``bundle`` named like libmlx."""
    found = []
    for root, dirs, files in os.walk(bundle):
        # Symlinked directories are listed in `dirs`; look at their entries too
        # without descending into them twice.
        for name in files + dirs:
            if name in LIBMLX_NAMES:
                found.append(Path(root) / name)
    return sorted(found)


def metallib_problems(bundle: Path) -> list[str]:
    """Return one message per libmlx location without a usable metallib beside it.

    Args:
        bundle: The ``.app`` folder (or any folder holding the collected MLX).

    Returns:
        Readable messages; empty when every libmlx has its metallib, and a message
        if the bundle holds no libmlx at all (MLX was not collected).
    """
    locations = libmlx_locations(bundle)
    if not locations:
        return [f"no {' or '.join(LIBMLX_NAMES)} under {bundle}: MLX was not collected"]
    problems = []
    for lib in locations:
        metallib = lib.parent / METALLIB
        if not metallib.is_file():  # follows symlinks: a dangling link fails too
            problems.append(
                f"{lib.relative_to(bundle)} has no {METALLIB} beside it; MLX would "
                "fail to load its Metal kernels"
            )
    return problems


def link_missing_metallibs(bundle: Path) -> list[Path]:
    """Add a relative symlink to the real metallib beside every libmlx lacking one.

    Returns:
        The symlinks created.

    Raises:
        FileNotFoundError: If the bundle holds no real ``mlx.metallib`` file.
    """
    real = sorted(
        path
        for path in bundle.rglob(METALLIB)
        if path.is_file() and not path.is_symlink()
    )
    if not real:
        raise FileNotFoundError(f"no {METALLIB} file under {bundle}")
    created = []
    for lib in libmlx_locations(bundle):
        target = lib.parent / METALLIB
        if target.is_file():
            continue
        if target.is_symlink():  # dangling
            target.unlink()
        target.symlink_to(os.path.relpath(real[0], lib.parent))
        created.append(target)
    return created


def parse_ldd(output: str) -> dict[str, str | None]:
    """Return ``{soname: resolved path or None}`` from ``ldd`` output.

    ``None`` means "not found". Lines without a soname (the vdso) map to "".
    """
    libraries: dict[str, str | None] = {}
    for line in output.splitlines():
        match = _LDD_LINE.match(line)
        if not match or line.strip().startswith(("statically", "not a dynamic")):
            continue
        name, target = match[1], match[2]
        if target is None:
            libraries[name] = ""  # vdso or the loader itself, given by path
        elif target.strip() == "not found":
            libraries[name] = None
        else:
            libraries[name] = target.strip()
    return libraries


def ldd_problems(output: str, bundle: Path, what: str) -> list[str]:
    """Return problems in the ``ldd`` output of a bundled library.

    A problem is a library that is not found, or a non-system library resolved from
    outside ``bundle``.

    Args:
        output: ``ldd`` output for the library.
        bundle: The bundle folder (``dist/swapless``).
        what: The library's name, for the messages.
    """
    problems = []
    bundle = bundle.resolve()
    for name, target in parse_ldd(output).items():
        if target is None:
            problems.append(f"{what}: {name} not found")
        elif target and not SYSTEM_LIBRARIES.match(name):
            resolved = Path(target).resolve()
            if bundle not in resolved.parents:
                problems.append(
                    f"{what}: {name} resolved outside the bundle ({target})"
                )
    return problems
