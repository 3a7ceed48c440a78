"""Build the double-clickable Swapless app with PyInstaller (``make package``).

Steps, all from the repository root:

1. Render the icons from ``resources/icon.svg`` (``packaging/icons.py``).
2. Run PyInstaller on ``packaging/swapless.spec`` (one-folder mode).
3. Finish and check the result for the platform:

   * Linux: ``dist/swapless/`` gets ``icons/hicolor/…`` and ``swapless.desktop``;
     ``ldd`` must resolve MLX's libraries (and its BLAS from the bundle), and the
     native kernel must be inside when this machine built it.
   * macOS: ``dist/Swapless.app`` must hold ``mlx.metallib`` beside every
     ``libmlx.dylib`` and carry the expected ``Info.plist``; then
     ``packaging/macos/sign-and-dmg.sh`` signs it and makes the DMG (``--no-dmg``:
     signs only).

Any failed check stops the build with a non-zero exit code.
"""

from __future__ import annotations

import argparse
import os
import plistlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

PACKAGING = Path(__file__).resolve().parent
REPO = PACKAGING.parent
sys.path.insert(0, str(PACKAGING))
sys.path.insert(0, str(PACKAGING / "linux"))

import bundle_checks  # noqa: E402
import bundle_info  # noqa: E402
import desktop_entry  # noqa: E402
import icons  # noqa: E402

DIST = REPO / "dist"
WORK = REPO / "build" / "pyinstaller"
ICON_DIR = REPO / "build" / "icons"


class BuildError(Exception):
    """A build step failed or the result failed a check."""


def _say(message: str) -> None:
    print(f"package: {message}", flush=True)


def run_pyinstaller(clean: bool) -> None:
    """Run PyInstaller on the spec, without the Makefile's OpenBLAS preload.

    PyInstaller finds dependencies with ``ldd``; with ``LD_PRELOAD`` set it would see
    (and bundle) the machine's OpenBLAS as if libmlx needed it.
    """
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.setdefault("QT_QPA_PLATFORM", "offscreen")  # the spec may render icons
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--noconfirm",
        "--log-level=WARN",
        f"--distpath={DIST}",
        f"--workpath={WORK}",
        str(PACKAGING / "swapless.spec"),
    ]
    if clean:
        command.insert(3, "--clean")
    if subprocess.run(command, cwd=REPO, env=env).returncode != 0:
        raise BuildError("PyInstaller failed (see its output above)")


def finish_linux(version: str) -> Path:
    """Add icons and the desktop entry to ``dist/swapless``; check MLX's libraries."""
    bundle = DIST / bundle_info.EXECUTABLE
    target_icons = desktop_entry.bundle_icons(bundle)
    if target_icons.exists():
        shutil.rmtree(target_icons)
    shutil.copytree(ICON_DIR / "hicolor", target_icons)
    entry = desktop_entry.write_bundle_entry(
        bundle, bundle / f"{desktop_entry.APP_ID}.desktop", version
    )
    _say(f"desktop entry {entry}")
    check_linux_libraries(bundle)
    check_native_kernel(bundle)
    return bundle


def check_native_kernel(bundle: Path) -> None:
    """Fail when this machine built the native kernel but the bundle lacks it."""
    sys.path.insert(0, str(REPO))
    from app.core.engine.cpu import native_build

    built = native_build.state()
    if built.path is None:
        _say(f"native kernel not bundled ({built.reason}): the app dequantizes")
        return
    bundled = bundle / "_internal" / native_build.BUNDLE_DIR / built.path.name
    if not bundled.is_file():
        raise BuildError(
            f"the native kernel {built.path.name} is not in {bundled.parent}"
        )
    _say(f"native kernel bundled: {bundled.relative_to(bundle)}")


def check_linux_libraries(bundle: Path) -> None:
    """Fail unless ``ldd`` resolves libmlx and the mlx extension inside the bundle."""
    internal = bundle / "_internal"
    libraries = sorted((internal / "mlx").glob("core.*.so"))
    libraries += sorted((internal / "mlx" / "lib").glob("libmlx*.so*"))
    if len(libraries) < 2:
        raise BuildError(
            f"MLX's core extension or libmlx.so is missing under {internal}"
        )
    # The loader must resolve them through their own rpaths, as at run time.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH")
    }
    problems = []
    for library in libraries:
        result = subprocess.run(
            ["ldd", str(library)], capture_output=True, text=True, env=env
        )
        if result.returncode != 0:
            problems.append(f"ldd {library} failed: {result.stderr.strip()}")
            continue
        problems += bundle_checks.ldd_problems(
            result.stdout, bundle, str(library.relative_to(bundle))
        )
        _say(f"ldd ok: {library.relative_to(bundle)}")
    if problems:
        raise BuildError("library check failed:\n  " + "\n  ".join(problems))


def finish_macos(version: str) -> Path:
    """Check the metallib placement and the Info.plist of ``dist/Swapless.app``."""
    app = DIST / f"{bundle_info.APP_NAME}.app"
    try:
        linked = bundle_checks.link_missing_metallibs(app)
    except FileNotFoundError as exc:
        raise BuildError(f"MLX was not collected whole: {exc}") from exc
    for link in linked:
        _say(f"linked {link.relative_to(app)} to the bundled mlx.metallib")
    problems = bundle_checks.metallib_problems(app)
    if problems:
        raise BuildError("metallib check failed:\n  " + "\n  ".join(problems))
    _say("mlx.metallib sits beside every libmlx.dylib")

    with open(app / "Contents" / "Info.plist", "rb") as f:
        plist = plistlib.load(f)
    expected = {
        "CFBundleIdentifier": bundle_info.BUNDLE_ID,
        "CFBundleShortVersionString": version,
        "NSHighResolutionCapable": True,
    }
    wrong = {k: plist.get(k) for k, v in expected.items() if plist.get(k) != v}
    if wrong or "LSMinimumSystemVersion" not in plist:
        raise BuildError(f"Info.plist is not as expected: {wrong or plist}")
    if not (app / "Contents" / "Resources" / plist["CFBundleIconFile"]).is_file():
        raise BuildError("the app icon is missing from Contents/Resources")
    _say(f"Info.plist ok (macOS {plist['LSMinimumSystemVersion']} or later)")
    return app


def sign_and_dmg(make_dmg: bool) -> None:
    """Sign the app (ad hoc unless an identity is configured) and make the DMG.

    Signing always runs: the checks above may have added links to the bundle, and
    Apple Silicon runs no code whose signature does not match.
    """
    script = PACKAGING / "macos" / "sign-and-dmg.sh"
    command = ["bash", str(script)] + ([] if make_dmg else ["--no-dmg"])
    if subprocess.run(command, cwd=REPO).returncode != 0:
        raise BuildError(f"{script.relative_to(REPO)} failed")


def folder_size(path: Path) -> int:
    """Return the bytes of the regular files under ``path`` (symlinks not followed)."""
    return sum(
        p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()
    )


def main(argv: list[str] | None = None) -> int:
    """Build; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clean", action="store_true", help="drop PyInstaller's cache")
    parser.add_argument(
        "--no-dmg", action="store_true", help="macOS: sign the app but make no DMG"
    )
    args = parser.parse_args(argv)
    if sys.platform not in ("linux", "darwin"):
        print(f"package: unsupported platform {sys.platform}", file=sys.stderr)
        return 2

    started = time.monotonic()
    version = bundle_info.project_version(REPO / "pyproject.toml")
    try:
        icons.generate(REPO / "resources" / "icon.svg", ICON_DIR)
        _say(f"icons in {ICON_DIR.relative_to(REPO)}")
        run_pyinstaller(args.clean)
        if sys.platform == "darwin":
            result = finish_macos(version)
            sign_and_dmg(make_dmg=not args.no_dmg)
        else:
            result = finish_linux(version)
    except BuildError as exc:
        print(f"package: FAILED: {exc}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    size_mb = folder_size(result) / 1e6
    _say(f"built {result.relative_to(REPO)} ({size_mb:.0f} MB) in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
