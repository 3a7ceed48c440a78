"""Every path Swapless reads or writes comes from here.

All user data lives under one home directory from platformdirs. Setting the environment
variable ``SWAPLESS_HOME`` moves all of it, which is what tests and CI do.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

HOME_ENV = "SWAPLESS_HOME"
APP_NAME = "Swapless"


def app_home() -> Path:
    """Return the directory that holds all Swapless data, creating it if needed."""
    override = os.environ.get(HOME_ENV)
    home = (
        Path(override).expanduser()
        if override
        else Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    )
    home.mkdir(parents=True, exist_ok=True)
    return home


def _subdir(name: str) -> Path:
    path = app_home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path


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
    return _subdir("prefix-cache")


def presets_dir() -> Path:
    """Return the folder of user presets."""
    return _subdir("presets")


def settings_path() -> Path:
    """Return the settings file."""
    return app_home() / "settings.toml"


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
    candidates.append(Path(__file__).resolve().parents[2] / "resources")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[-1]
