"""One check for settings-like dicts: every key must be one the reader knows.

Presets, app settings and budget settings are typed dataclasses read from files the
user may edit; an unknown key is refused with the key and the allowed ones, the same
way everywhere, rather than silently ignored (a typo would otherwise change nothing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.core.errors import SettingsError


def reject_unknown_keys(
    data: Mapping[str, object], allowed: Iterable[str], what: str
) -> None:
    """Raise if ``data`` has a key outside ``allowed``.

    Args:
        data: The dict to check.
        allowed: The known keys, in the order the message lists them.
        what: What is being read, for the message (e.g. ``preset 'chat'``).

    Raises:
        SettingsError: Naming the first unknown key (sorted) and the allowed keys.
    """
    allowed = list(allowed)
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise SettingsError(
            f"{what}: unknown key {unknown[0]!r}; allowed keys are {', '.join(allowed)}"
        )
