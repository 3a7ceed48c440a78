"""Window geometry, splitter sizes and the last open conversation, kept between runs.

Stored with QSettings in an INI file under ``SWAPLESS_HOME`` (never the platform's
registry or the real user's config), so tests and a moved home stay self-contained.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from app.core.files import paths, private_files

FILE_NAME = "window-state.ini"


def window_settings() -> QSettings:
    """The QSettings of the window state."""
    return QSettings(str(paths.app_home() / FILE_NAME), QSettings.Format.IniFormat)


def save_window_state(
    geometry: QByteArray, splitter: QByteArray, conversation_id: int | None
) -> None:
    """Remember the window's geometry, its splitter and the open conversation."""
    state = window_settings()
    state.setValue("window/geometry", geometry)
    state.setValue("window/splitter", splitter)
    state.setValue("chat/last_conversation", conversation_id if conversation_id else 0)
    state.sync()
    # QSettings writes with the umask's mode; the file names the open conversation.
    private_files.make_private(paths.app_home() / FILE_NAME)


def load_window_state() -> tuple[QByteArray | None, QByteArray | None, int | None]:
    """Return (geometry, splitter state, last conversation id), None where unknown."""
    state = window_settings()
    geometry = state.value("window/geometry")
    splitter = state.value("window/splitter")
    try:
        raw: Any = state.value("chat/last_conversation", 0)  # a QVariant: any type
        conversation = int(raw or 0)
    except (TypeError, ValueError):
        conversation = 0
    return (
        geometry if isinstance(geometry, QByteArray) else None,
        splitter if isinstance(splitter, QByteArray) else None,
        conversation or None,
    )
