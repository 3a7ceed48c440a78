"""Where presets live: the built-in ones, the user's files, lookup, saving, repair.

Built-in presets come from ``resources/presets.toml``; user presets are TOML files under
``SWAPLESS_HOME/presets``. A broken user file is skipped with a notice, never stopping
the others. `repaired_preset` turns settings from outside (an imported conversation)
into the closest valid preset and says what it replaced. The `Preset` type and its
value rules are in `app.core.presets.preset_values` (re-exported here, the name most
callers import them by).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import tomli_w

from app.core.errors import SettingsError
from app.core.files import bounded_read, partial_files, paths, private_files
from app.core.presets.preset_values import (
    DEFAULT_PRESET,
    KEEP_RATIO_RANGE,
    MAX_CONTEXT,
    MIN_CONTEXT,
    OPTIONAL_DEFAULTS,
    PRESET_FIELDS,
    THINKING_KEYS,
    VALID_SUMMARY_MODES,
    VALID_TRIM_METHODS,
    VALUE_RANGES,
    Preset,
    check_value,
    preset_from_dict,
    valid_preset_name,
)

__all__ = [
    "DEFAULT_PRESET",
    "KEEP_RATIO_RANGE",
    "MAX_CONTEXT",
    "MIN_CONTEXT",
    "OPTIONAL_DEFAULTS",
    "THINKING_KEYS",
    "VALID_SUMMARY_MODES",
    "VALID_TRIM_METHODS",
    "VALUE_RANGES",
    "Preset",
    "all_presets",
    "builtin_presets",
    "delete_user_preset",
    "get_preset",
    "preset_from_dict",
    "repaired_preset",
    "save_user_preset",
    "skipped_user_presets",
    "user_presets",
    "valid_preset_name",
]

logger = logging.getLogger(__name__)


def repaired_preset(name: Any, data: Any) -> tuple[Preset, list[str]]:
    """Return the closest valid preset to possibly invalid stored settings.

    For settings that come from outside (an imported conversation): every valid value
    is kept; an invalid name, an unknown key or an invalid value is replaced by the
    default, and each replacement is described so the caller can say so.

    Args:
        name: The stored preset name (None for none).
        data: The stored settings (a dict, ideally a full `Preset.to_dict`).

    Returns:
        The preset, and one sentence per replacement (empty when ``data`` was valid).
    """
    notes = []
    if name is None:
        name = DEFAULT_PRESET
    elif not isinstance(name, str) or not valid_preset_name(name):
        notes.append(
            f"preset name {_short_repr(name)} is not a valid name; "
            f"{DEFAULT_PRESET!r} is used"
        )
        name = DEFAULT_PRESET
    if not isinstance(data, dict):
        notes.append("the settings are not a table; the defaults are used")
        data = {}
    builtins = builtin_presets()
    base = builtins.get(name, builtins[DEFAULT_PRESET]).to_dict()
    values = {k: v for k, v in data.items() if k != "name"}
    unknown = sorted(str(k) for k in set(values) - set(PRESET_FIELDS))
    if unknown:
        notes.append(
            f"unknown setting(s) {', '.join(map(_short_repr, unknown))} dropped"
        )
    missing = [
        k
        for k in PRESET_FIELDS
        if k != "name" and k not in values and k not in OPTIONAL_DEFAULTS
    ]
    if missing and values:
        listed = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        notes.append(f"missing setting(s) {listed} set to the defaults of {name!r}")
    elif missing:
        notes.append(f"no settings were stored; the defaults of {name!r} are used")
    for key, value in values.items():
        if key not in PRESET_FIELDS:
            continue
        try:
            base[key] = check_value(name, key, value)
        except SettingsError as exc:
            notes.append(f"{exc}; the default {base[key]!r} is used")
    try:
        return preset_from_dict(name, base), notes
    except SettingsError as exc:
        # Aging keys valid one by one but not together: aging as the defaults have it.
        defaults = builtins.get(name, builtins[DEFAULT_PRESET]).to_dict()
        base.update({key: defaults[key] for key in OPTIONAL_DEFAULTS})
        notes.append(f"{exc}; the KV aging settings of {name!r} are used")
        return preset_from_dict(name, base), notes


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return bounded_read.read_toml(path, what="The preset file")
    except FileNotFoundError:
        raise SettingsError(f"The preset file {path} does not exist.") from None
    except bounded_read.FileReadError as exc:
        raise SettingsError(str(exc)) from exc


def builtin_presets() -> dict[str, Preset]:
    """Return the presets shipped with Swapless, by name."""
    tables = _read_toml(paths.resources_dir() / "presets.toml")
    return {name: preset_from_dict(name, table) for name, table in tables.items()}


def user_presets() -> dict[str, Preset]:
    """Return the user's usable presets (one TOML file each), by name.

    A file that cannot be read or holds a bad value is skipped with a logged notice
    (`skipped_user_presets` says which and why): one broken file must never stop
    the built-in presets, or the user's other ones, from working.
    """
    return _scan_user_presets()[0]


def skipped_user_presets() -> list[str]:
    """Return one line per user preset file that is not used, saying why."""
    presets, skipped = _scan_user_presets()
    builtins = builtin_presets()
    skipped += [
        f"The preset file {paths.presets_dir() / (name + '.toml')} has the name of a "
        f"built-in preset and is not used; rename it."
        for name in presets
        if name in builtins
    ]
    return skipped


def _scan_user_presets() -> tuple[dict[str, Preset], list[str]]:
    found, skipped = {}, []
    for path in sorted(paths.presets_dir().glob("*.toml")):
        if partial_files.is_partial(path):
            continue  # being written (or left by a crash; the next start removes it)
        try:
            found[path.stem] = preset_from_dict(path.stem, _read_toml(path))
        except SettingsError as exc:
            reason = str(exc).rstrip(".")
            if str(path) not in reason:
                reason = f"The preset file {path}: {reason}"
            line = f"{reason}. It is skipped; the other presets work."
            if line not in _noticed:
                _noticed.add(line)
                logger.warning("%s", line)
            skipped.append(line)
    return found, skipped


# Notices already logged: presets are listed often, a broken file is told once.
_noticed: set[str] = set()


def all_presets() -> dict[str, Preset]:
    """Return built-in and user presets; a user preset may not shadow a built-in."""
    presets = builtin_presets()
    for name, preset in user_presets().items():
        if name in presets:
            line = (
                f"The preset file {paths.presets_dir() / (name + '.toml')} has the "
                "name of a built-in preset and is not used; rename it."
            )
            if line not in _noticed:
                _noticed.add(line)
                logger.warning("%s", line)
            continue
        presets[name] = preset
    return presets


def get_preset(name: str) -> Preset:
    """Return one preset by name.

    Raises:
        SettingsError: If there is no such preset; the message lists the known ones.
    """
    presets = all_presets()
    if name not in presets:
        raise SettingsError(
            f"unknown preset {name!r}; choose one of {', '.join(presets)}"
        )
    return presets[name]


def save_user_preset(preset: Preset) -> Path:
    """Write a user preset to ``SWAPLESS_HOME/presets/<name>.toml``.

    Raises:
        SettingsError: If the name is taken by a built-in preset, or the file
            cannot be written.
    """
    if preset.name in builtin_presets():
        raise SettingsError(
            f"{preset.name!r} is a built-in preset; save under another name"
        )
    path = paths.presets_dir() / f"{preset.name}.toml"
    # A real writer: escaping by hand wrote a form feed or ESC as invalid TOML.
    text = tomli_w.dumps(
        {
            key: value
            for key, value in preset.to_dict().items()
            if key != "name" and value is not None
        }
    )
    try:
        private_files.write_private_text(path, text)
    except OSError as exc:
        raise SettingsError(
            f"Preset file {path} cannot be written: {exc.strerror or exc}"
        ) from exc
    return path


def delete_user_preset(name: str) -> None:
    """Remove a user preset file, if it exists."""
    (paths.presets_dir() / f"{name}.toml").unlink(missing_ok=True)
