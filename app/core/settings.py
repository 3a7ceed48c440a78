"""The app's own settings: memory budget, theme, default preset, cache and model folders.

One typed, frozen `AppSettings` with `DEFAULT_*` constants, stored as TOML at
`paths.settings_path()`. The desktop app's settings dialog and the model manager edit
it; the budget part becomes a `BudgetSettings` for the doctor and the device limit.
Every value is checked on load and on change, and an unknown key or a bad value is
refused with a message naming the key and the allowed values, like presets are.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import tomli_w

from app.core.budget.memory_budget import (
    DEFAULT_MEMORY_CAP_FRACTION,
    DEFAULT_RESERVE_BYTES,
    DEFAULT_SAFETY_FACTOR,
    MEMORY_CAP_RANGE,
    SAFETY_FACTOR_RANGE,
    BudgetSettings,
)
from app.core.errors import SettingsError
from app.core.files import bounded_read, paths, private_files
from app.core.known_keys import reject_unknown_keys
from app.core.presets.presets import DEFAULT_PRESET

GIB = 1024**3

VALID_THEMES = ("system", "light", "dark")
DEFAULT_THEME = "system"
DEFAULT_DEFAULT_PRESET = DEFAULT_PRESET
DEFAULT_PREFIX_CACHE_DISK_CAP_BYTES = 4 * GIB
"""Disk the on-disk prefix (KV) cache may use: about forty 4K-token fp32 caches of a
0.5B model, or a few dozen 8-bit caches of a 7B one; enough to resume recent
conversations without a prefill, small next to a model's weights."""
PREFIX_CACHE_DISK_CAP_RANGE = (0, 1024 * GIB)
RESERVE_BYTES_RANGE = (0, 1024 * GIB)
DEFAULT_MODEL_FOLDERS: tuple[str, ...] = ()
DEFAULT_LAST_MODEL = ""
DEFAULT_SERVER_ENABLED = False
DEFAULT_SERVER_PORT = 8989
"""Next to nobody's default (LM Studio 1234, Ollama 11434, llama.cpp/mlx-lm 8080)."""
SERVER_PORT_RANGE = (1024, 65535)

_PRESET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


@dataclass(frozen=True)
class AppSettings:
    """Everything the user can set outside a conversation.

    Attributes:
        memory_cap_fraction: Share of total RAM Swapless plans to use.
        reserve_bytes: Bytes kept free inside that share for other apps.
        safety_factor: Share of the remaining room the KV cache may fill.
        theme: ``system`` (follow the desktop), ``light`` or ``dark``.
        default_preset: Preset of new conversations.
        prefix_cache_disk_cap_bytes: Disk the prefix (KV) cache may use; 0 turns the
            disk cache off.
        model_folders: Extra folders the model manager searches for models.
        last_model: The model folder loaded last, loaded again at start ("" for none).
        server_enabled: Run the local OpenAI-compatible server with the app (on
            127.0.0.1, with the app's loaded model).
        server_port: Its port.
    """

    memory_cap_fraction: float = DEFAULT_MEMORY_CAP_FRACTION
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    safety_factor: float = DEFAULT_SAFETY_FACTOR
    theme: str = DEFAULT_THEME
    default_preset: str = DEFAULT_DEFAULT_PRESET
    prefix_cache_disk_cap_bytes: int = DEFAULT_PREFIX_CACHE_DISK_CAP_BYTES
    model_folders: tuple[str, ...] = DEFAULT_MODEL_FOLDERS
    last_model: str = DEFAULT_LAST_MODEL
    server_enabled: bool = DEFAULT_SERVER_ENABLED
    server_port: int = DEFAULT_SERVER_PORT

    def __post_init__(self):
        for item in fields(self):
            object.__setattr__(
                self, item.name, _check(item.name, getattr(self, item.name))
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AppSettings:
        """Build settings from a dict such as a parsed settings file.

        Keys left out keep their default.

        Raises:
            SettingsError: An unknown key (the message lists the known ones) or an
                invalid value (the message names the key and the allowed values).
        """
        reject_unknown_keys(data, (item.name for item in fields(cls)), "settings")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """Return every setting as plain values (lists, not tuples)."""
        data = asdict(self)
        data["model_folders"] = list(self.model_folders)
        return data

    def with_changes(self, **changes: Any) -> AppSettings:
        """Return a validated copy with some settings changed.

        Raises:
            SettingsError: As `from_dict`.
        """
        data = asdict(self)
        data.update(changes)
        return AppSettings.from_dict(data)

    def budget(self) -> BudgetSettings:
        """The memory-budget part, for the doctor and the device's context limit."""
        return BudgetSettings(
            memory_cap_fraction=self.memory_cap_fraction,
            reserve_bytes=self.reserve_bytes,
            safety_factor=self.safety_factor,
        )


def _check(key: str, value: Any) -> Any:
    where = f"setting {key!r}"
    if key in ("memory_cap_fraction", "safety_factor"):
        low, high = (
            MEMORY_CAP_RANGE if key == "memory_cap_fraction" else SAFETY_FACTOR_RANGE
        )
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(f"{where} must be a number, got {value!r}")
        if not low <= value <= high:
            raise SettingsError(
                f"{where} must be between {low} and {high}, got {value!r}"
            )
        return float(value)
    if key in ("reserve_bytes", "prefix_cache_disk_cap_bytes"):
        low, high = (
            RESERVE_BYTES_RANGE
            if key == "reserve_bytes"
            else PREFIX_CACHE_DISK_CAP_RANGE
        )
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(
                f"{where} must be a whole number of bytes, got {value!r}"
            )
        if not low <= value <= high:
            raise SettingsError(
                f"{where} must be between {low} and {high} bytes, got {value!r}"
            )
        return value
    if key == "theme":
        if value not in VALID_THEMES:
            raise SettingsError(
                f"{where} must be one of {', '.join(VALID_THEMES)}, got {value!r}"
            )
        return value
    if key == "default_preset":
        if not isinstance(value, str) or not _PRESET_NAME.match(value):
            raise SettingsError(
                f"{where} must be a preset name (1-40 lowercase letters, digits, '-' "
                f"or '_'), got {value!r}"
            )
        return value
    if key == "model_folders":
        if isinstance(value, str) or not isinstance(value, list | tuple):
            raise SettingsError(f"{where} must be a list of folders, got {value!r}")
        if not all(isinstance(item, str) and item for item in value):
            raise SettingsError(
                f"{where} must contain folder paths as text, got {value!r}"
            )
        return tuple(dict.fromkeys(value))  # keeps order, drops repeats
    if key == "last_model":
        if not isinstance(value, str):
            raise SettingsError(f"{where} must be a folder path as text, got {value!r}")
        return value
    if key == "server_enabled":
        if not isinstance(value, bool):
            raise SettingsError(f"{where} must be true or false, got {value!r}")
        return value
    if key == "server_port":
        low, high = SERVER_PORT_RANGE
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{where} must be a whole number, got {value!r}")
        if not low <= value <= high:
            raise SettingsError(
                f"{where} must be between {low} and {high}, got {value}"
            )
        return value
    raise AssertionError(f"no check for {key}")  # a field was added without one


def load_settings(path: Path | None = None) -> AppSettings:
    """Read the settings file; a missing file gives the defaults.

    Args:
        path: The file; defaults to `paths.settings_path()`.

    Raises:
        SettingsError: The file cannot be read or parsed, or holds an unknown key or
            an invalid value; the message names the file and the key.
    """
    path = Path(path) if path is not None else paths.settings_path()
    try:
        data = bounded_read.read_toml(path, what="The settings file")
    except FileNotFoundError:
        return AppSettings()
    except bounded_read.FileReadError as exc:
        raise SettingsError(str(exc)) from exc
    try:
        return AppSettings.from_dict(data)
    except SettingsError as exc:
        raise SettingsError(f"Settings file {path}: {exc}") from exc


def save_settings(settings: AppSettings, path: Path | None = None) -> Path:
    """Write the settings file, atomically and readable only by this user.

    Returns:
        The file written.

    Raises:
        SettingsError: The file cannot be written.
    """
    path = Path(path) if path is not None else paths.settings_path()
    text = (
        "# Swapless settings. Edit in the app (Settings) or here; unknown keys are "
        "refused.\n" + tomli_w.dumps(settings.to_dict())
    )
    try:
        private_files.make_private_dir(path.parent)
        private_files.write_private_text(path, text)
    except OSError as exc:
        raise SettingsError(
            f"Settings file {path} cannot be written: {exc.strerror or exc}"
        ) from exc
    return path
