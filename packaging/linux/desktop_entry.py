#!/usr/bin/env python3
"""Put the built Linux app into the desktop's application menu.

A freedesktop.org desktop entry (``swapless.desktop``) is what makes an app appear in
GNOME/KDE/Xfce menus and docks and start on a double-click. Its ``Exec`` key needs an
absolute path, so the entry is written for wherever the built folder is:

* ``write``: the build writes ``dist/swapless/swapless.desktop`` with absolute ``Exec``
  and ``Icon`` paths into the folder; it works as is (e.g. copied to the desktop).
* ``install``: ``make install-desktop`` copies the icons into the user's hicolor theme
  and writes ``~/.local/share/applications/swapless.desktop`` (``Icon=swapless``).
* ``uninstall``: removes what ``install`` wrote.

Standard library only: it runs with any ``python3``, no venv needed.

Usage::

    python3 packaging/linux/desktop_entry.py write BUNDLE [--out FILE]
    python3 packaging/linux/desktop_entry.py install BUNDLE [--data-home DIR]
    python3 packaging/linux/desktop_entry.py uninstall [--data-home DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

APP_ID = "swapless"  # desktop file id, icon name, executable name
APP_NAME = "Swapless"
# Qt uses QGuiApplication.applicationName() as the X11 WM_CLASS class; app/ui sets it
# to "Swapless" (and setDesktopFileName("swapless") for Wayland's app id).
WM_CLASS = "Swapless"
COMMENT = "Chat with local MLX models without letting the KV cache eat the machine"
CATEGORIES = ("Utility", "Development")
KEYWORDS = ("LLM", "MLX", "chat", "AI", "language model")
ICON_SIZE_FOR_BUNDLE = 256

# Characters that force quoting of an Exec argument (Desktop Entry Spec, "The Exec key").
_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


def quote_exec_argument(argument: str) -> str:
    """Return ``argument`` quoted for an ``Exec`` value, escaped for the file.

    The spec quotes an argument containing reserved characters in double quotes,
    backslash-escaping ``"``, `````, ``$`` and ``\\`` inside; then, as for every
    string value, each backslash is written twice. ``%`` becomes ``%%`` (field codes).

    Raises:
        ValueError: If ``argument`` contains a newline (not representable).
    """
    if "\n" in argument or "\r" in argument:
        raise ValueError(f"an Exec argument cannot contain a newline: {argument!r}")
    argument = argument.replace("%", "%%")
    if any(char in _RESERVED for char in argument):
        inner = "".join("\\" + c if c in '"`$\\' else c for c in argument)
        argument = f'"{inner}"'
    return argument.replace("\\", "\\\\")


def _escape_string(value: str) -> str:
    """Escape a ``string``/``localestring`` value (backslash, newline, tab)."""
    return (
        value.replace("\\", "\\\\")
        .replace("\n", "\\n")
        .replace("\t", "\\t")
        .replace("\r", "\\r")
    )


def desktop_entry(executable: Path, icon: str, version: str | None = None) -> str:
    """Return the text of ``swapless.desktop``.

    Args:
        executable: Absolute path of the built ``swapless`` executable.
        icon: An icon theme name (``swapless``) or an absolute path to a PNG/SVG.
        version: The app's version, recorded as ``X-Swapless-Version``.

    Raises:
        ValueError: If ``executable`` is not absolute.
    """
    if not executable.is_absolute():
        raise ValueError(f"Exec needs an absolute path, got {executable}")
    lines = [
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.4",  # the newest desktop-file-validate 0.26 knows
        f"Name={APP_NAME}",
        "GenericName=Local LLM Chat",
        f"Comment={_escape_string(COMMENT)}",
        f"Exec={quote_exec_argument(str(executable))}",
        f"TryExec={_escape_string(str(executable))}",
        f"Icon={_escape_string(icon)}",
        "Terminal=false",
        f"Categories={';'.join(CATEGORIES)};",
        f"Keywords={';'.join(KEYWORDS)};",
        "StartupNotify=true",
        f"StartupWMClass={WM_CLASS}",
    ]
    if version:
        lines.append(f"X-Swapless-Version={_escape_string(version)}")
    return "\n".join(lines) + "\n"


def bundle_executable(bundle: Path) -> Path:
    """Return the executable of a built folder, checking that it is there.

    Raises:
        FileNotFoundError: If ``bundle`` holds no executable ``swapless``.
    """
    executable = bundle.resolve() / APP_ID
    if not (executable.is_file() and os.access(executable, os.X_OK)):
        raise FileNotFoundError(
            f"{executable} is missing or not executable; build it first (make package)"
        )
    return executable


def bundle_icons(bundle: Path) -> Path:
    """Return the hicolor icon folder shipped inside a built folder."""
    return bundle.resolve() / "icons" / "hicolor"


def write_bundle_entry(bundle: Path, out: Path, version: str | None = None) -> Path:
    """Write the self-contained entry (absolute ``Exec`` and ``Icon``) to ``out``."""
    size = ICON_SIZE_FOR_BUNDLE
    icon = bundle_icons(bundle) / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
    out.write_text(
        desktop_entry(bundle_executable(bundle), str(icon), version), encoding="utf-8"
    )
    return out


def data_home() -> Path:
    """Return ``$XDG_DATA_HOME`` or ``~/.local/share``."""
    value = os.environ.get("XDG_DATA_HOME")
    return (
        Path(value) if value and os.path.isabs(value) else Path.home() / ".local/share"
    )


def installed_paths(home: Path, icon_dirs: list[str]) -> list[Path]:
    """Return the files `install` writes under ``home`` (for `uninstall`)."""
    paths = [home / "applications" / f"{APP_ID}.desktop"]
    for size_dir in icon_dirs:
        suffix = "svg" if size_dir == "scalable" else "png"
        paths.append(
            home / "icons" / "hicolor" / size_dir / "apps" / f"{APP_ID}.{suffix}"
        )
    return paths


def _run_if_present(command: list[str]) -> None:
    """Run a desktop cache tool when it is installed; its failure is not ours."""
    if shutil.which(command[0]):
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL)


def install(bundle: Path, home: Path, version: str | None = None) -> list[Path]:
    """Install the entry and icons of ``bundle`` into the menu under ``home``.

    Args:
        bundle: The built folder (``dist/swapless``).
        home: The XDG data home (``~/.local/share``).
        version: Recorded in the entry.

    Returns:
        The files written.
    """
    executable = bundle_executable(bundle)
    source_icons = bundle_icons(bundle)
    if not source_icons.is_dir():
        raise FileNotFoundError(
            f"{source_icons} is missing; build first (make package)"
        )
    written = []
    for icon in sorted(source_icons.glob(f"*/apps/{APP_ID}.*")):
        target = home / "icons" / "hicolor" / icon.relative_to(source_icons)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(icon, target)
        written.append(target)
    entry = home / "applications" / f"{APP_ID}.desktop"
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(desktop_entry(executable, APP_ID, version), encoding="utf-8")
    written.append(entry)
    _run_if_present(["update-desktop-database", "-q", str(entry.parent)])
    # A newer folder time tells icon caches to look again. No icon-theme.cache is
    # written here: a stale one in the user's folder would hide other apps' icons.
    (home / "icons" / "hicolor").touch()
    return written


def uninstall(home: Path) -> list[Path]:
    """Remove what `install` wrote under ``home``; return the files removed."""
    hicolor = home / "icons" / "hicolor"
    size_dirs = sorted(p.name for p in hicolor.iterdir()) if hicolor.is_dir() else []
    removed = []
    for path in installed_paths(home, size_dirs):
        if path.is_file():
            path.unlink()
            removed.append(path)
    _run_if_present(["update-desktop-database", "-q", str(home / "applications")])
    return removed


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write", help="write BUNDLE/swapless.desktop")
    write.add_argument("bundle", type=Path)
    write.add_argument("--out", type=Path)
    write.add_argument("--version")
    add = commands.add_parser("install", help="add BUNDLE to the application menu")
    add.add_argument("bundle", type=Path)
    add.add_argument("--data-home", type=Path, default=None)
    add.add_argument("--version")
    remove = commands.add_parser("uninstall", help="remove it from the menu")
    remove.add_argument("--data-home", type=Path, default=None)
    args = parser.parse_args(argv)

    try:
        if args.command == "write":
            out = write_bundle_entry(
                args.bundle, args.out or args.bundle / f"{APP_ID}.desktop", args.version
            )
            print(f"desktop entry: {out}")
        elif args.command == "install":
            home = args.data_home or data_home()
            for path in install(args.bundle, home, args.version):
                print(f"installed {path}")
            executable = bundle_executable(args.bundle)
            print(f"{APP_NAME} is in the application menu (Exec={executable}).")
        else:
            for path in uninstall(args.data_home or data_home()):
                print(f"removed {path}")
    except FileNotFoundError as exc:
        print(f"desktop_entry: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
