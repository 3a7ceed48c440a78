"""Which system libraries Qt's X11 (xcb) platform plugin cannot load, found before Qt aborts.

Qt aborts the whole process when its platform plugin does not load, with a message that
names only one candidate library (often one that is installed). This module asks the
dynamic loader which of the plugin's libraries are missing and turns them into one line
with the Debian/Ubuntu and Fedora packages to install. It never imports Qt: the check
runs before the window is created, so the command can fall back to the terminal chat.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# soname -> (Debian/Ubuntu package, Fedora package). The libraries Qt 6's xcb plugin
# links (read with `ldd libqxcb.so`); the list also serves as the probe list where
# `ldd` is unavailable.
PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb"),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb"),
    "libxcb-xinerama.so.0": ("libxcb-xinerama0", "libxcb"),
    "libxcb-glx.so.0": ("libxcb-glx0", "libxcb"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
}

# The line the README gives for Linux: every package above that a desktop may lack.
APT_LINE = (
    "sudo apt install libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-image0 "
    "libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-randr0 libxcb-xkb1 "
    "libxkbcommon-x11-0 libgl1 libegl1"
)

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def uses_xcb(environ: dict[str, str] | None = None) -> bool:
    """Whether Qt will pick its xcb plugin here (Linux/BSD with an X11 display)."""
    env = os.environ if environ is None else environ
    if sys.platform in ("darwin", "win32"):
        return False
    platform = env.get("QT_QPA_PLATFORM", "")
    if platform:
        # "xcb", or a fallback list such as "wayland;xcb" where xcb may be tried.
        return "xcb" in platform.split(";")
    if env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") == "wayland":
        return False
    return bool(env.get("DISPLAY"))


def xcb_plugin() -> Path | None:
    """The xcb platform plugin of the installed PySide6, or None when there is none."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        for candidate in (
            Path(root) / "Qt" / "plugins" / "platforms" / "libqxcb.so",
            Path(root) / "plugins" / "platforms" / "libqxcb.so",
        ):
            if candidate.is_file():
                return candidate
    return None


def missing_libraries(plugin: Path | None = None) -> list[str]:
    """The sonames the xcb plugin needs that the dynamic loader cannot find.

    Asks ``ldd`` (which follows the plugin's own dependencies, Qt's included); where
    ``ldd`` is missing, tries to load each library of `PACKAGES` itself.

    Args:
        plugin: The plugin file; None looks up PySide6's.
    """
    plugin = plugin or xcb_plugin()
    ldd = shutil.which("ldd")
    if plugin is not None and ldd is not None:
        try:
            result = subprocess.run(
                [ldd, str(plugin)], capture_output=True, text=True, timeout=20
            )
        except (OSError, subprocess.SubprocessError):
            result = None
        if result is not None and result.returncode == 0:
            return list(dict.fromkeys(_NOT_FOUND.findall(result.stdout)))
    missing = []
    for soname in PACKAGES:
        try:
            ctypes.CDLL(soname)
        except OSError:
            missing.append(soname)
    return missing


def _debian_name(soname: str) -> str:
    """Debian's usual package for an unlisted soname: ``libfoo-bar.so.3`` → ``libfoo-bar3``."""
    stem, _, version = soname.partition(".so")
    version = version.lstrip(".").split(".")[0]
    joiner = "-" if stem[-1:].isdigit() else ""
    return f"{stem.lower()}{joiner}{version}"


def install_advice(missing: list[str]) -> str:
    """One line naming the missing libraries and the packages that provide them."""
    debian = list(
        dict.fromkeys(PACKAGES.get(s, (_debian_name(s), ""))[0] for s in missing)
    )
    fedora = list(dict.fromkeys(PACKAGES[s][1] for s in missing if s in PACKAGES))
    unknown = [s for s in missing if s not in PACKAGES]
    fedora_text = " ".join(fedora)
    if unknown:
        fedora_text = (
            fedora_text + " and the packages of " if fedora else "the packages of "
        )
        fedora_text += ", ".join(unknown) + " (dnf provides '*/NAME')"
    return (
        f"the window needs system libraries that are not installed ({', '.join(missing)}); "
        f"install them with `sudo apt install {' '.join(debian)}` (Debian/Ubuntu) or "
        f"`sudo dnf install {fedora_text}` (Fedora)"
    )


def window_blocker(environ: dict[str, str] | None = None) -> str | None:
    """Why Qt's window would abort here (the install advice), or None when it can open."""
    if not uses_xcb(environ):
        return None
    missing = missing_libraries()
    return install_advice(missing) if missing else None
