"""Every path Swapless reads or writes comes from here.

All user data lives under one home directory from platformdirs. Setting the environment
variable ``SWAPLESS_HOME`` moves all of it, which is what tests and CI do. The home is
private to the user (`private_files`): it holds every conversation.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import platformdirs

from app.core.errors import KnownError
from app.core.files import partial_files, private_files

HOME_ENV = "SWAPLESS_HOME"
APP_NAME = "Swapless"
PREFIX_CACHE_DIR = "prefix-cache"
PRESETS_DIR = "presets"


# Homes whose permissions this process has checked already (it may use several: tests).
_checked_homes: set[Path] = set()


def app_home() -> Path:
    """Return the directory that holds all Swapless data, creating it if needed.

    A new home is created private (0700). The first time a process uses an existing
    one, it is tightened if other users could read it and cleared of the partial files
    dead processes left (`_tidy`).
    """
    override = os.environ.get(HOME_ENV)
    home = (
        Path(override).expanduser()
        if override
        else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    )
    if home not in _checked_homes and home.is_dir():
        refuse_unsafe_home(home)
        if home_is_writable(home):  # a read-only home (a backup) is only read
            _tidy(home)
    # The folders the home is made in are not Swapless's to lock down; the home is.
    home.parent.mkdir(parents=True, exist_ok=True)
    private_files.make_private_dir(home)
    _checked_homes.add(home)
    return home


def home_is_writable(home: Path | None = None) -> bool:
    """Whether this process may write in the home (False on a read-only mount).

    ``os.access`` answers for the real filesystem: a read-only mount is refused
    even to root.
    """
    folder = home if home is not None else app_home()
    return os.access(folder, os.W_OK)


class UnsafeHomeError(KnownError):
    """The home belongs to another user or other users can write to it."""


def refuse_unsafe_home(home: Path) -> None:
    """Refuse a home that another account controls, as ssh refuses such a ``~/.ssh``.

    Whoever can write to the home can replace the settings, presets or database, and
    whoever owns it can read every conversation; tightening the permissions would not
    help against either.

    Raises:
        UnsafeHomeError: ``home`` is owned by another user, or group or others may
            write to it.
    """
    info = home.stat()
    if info.st_uid != os.geteuid():
        raise UnsafeHomeError(
            f"The Swapless home {home} belongs to another user (uid {info.st_uid}), "
            "who could read and change your conversations; set "
            f"{HOME_ENV} to a folder of your own, or take the folder over with "
            f"'chown -R {os.geteuid()} {home}'."
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeHomeError(
            f"The Swapless home {home} can be written by other users, who could "
            f"change your settings and conversations; run 'chmod 700 {home}' (and "
            "check what is in it), or set "
            f"{HOME_ENV} to a folder of your own."
        )


def _tidy(home: Path) -> None:
    """Start-up care of an existing home: private permissions, no dead writers' files.

    A partial file a dead process left (a prefix-cache entry cut short by a full disk)
    may hold the very space every later command needs, so it goes before anything
    else opens the home.
    """
    private_files.tighten_home(home)
    partial_files.remove_stale(home, legacy_pattern="*.tmp")
    partial_files.remove_stale(home / PRESETS_DIR)
    # Version 0.1 named its prefix-cache temporaries "<key>.safetensors.tmp.safetensors".
    partial_files.remove_stale(home / PREFIX_CACHE_DIR, legacy_pattern="*.tmp*")


def _subdir(name: str) -> Path:
    return private_files.make_private_dir(app_home() / name)


def models_dir() -> Path:
    """Return the folder for models Swapless builds or downloads itself."""
    return _subdir("models")


def demo_model_dir() -> Path:
    """Return the folder of the demo model (built on first use)."""
    return models_dir() / "demo"


def database_path() -> Path:
    """Return the SQLite file that holds every conversation."""
    return app_home() / "swapless.db"


def prefix_cache_dir() -> Path:
    """Return the folder of the on-disk prefix (KV) cache."""
    return _subdir(PREFIX_CACHE_DIR)


def presets_dir() -> Path:
    """Return the folder of user presets."""
    return _subdir(PRESETS_DIR)


def settings_path() -> Path:
    """Return the settings file."""
    return app_home() / "settings.toml"


def speed_record_path() -> Path:
    """Return the file of prefill and decode speeds measured on this machine."""
    return app_home() / "measured-speed.json"


def known_files_path() -> Path:
    """Return the file that remembers where documents were read from (for Resume)."""
    return app_home() / "document-files.json"


def logs_dir() -> Path:
    """Return the folder for log files."""
    return _subdir("logs")


def resources_dir() -> Path:
    """Return the folder of bundled resources (presets, icons).

    A source checkout has it at the repository top level; a frozen PyInstaller build
    unpacks it next to the executable's data (``sys._MEIPASS``).
    """
    frozen_root = getattr(sys, "_MEIPASS", None)
    candidates = []
    if frozen_root:
        candidates.append(Path(frozen_root) / "resources")
    candidates.append(Path(__file__).resolve().parents[3] / "resources")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[-1]
