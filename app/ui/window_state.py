"""Window geometry, splitter sizes and the last open conversation, kept between runs.

Stored with QSettings in an INI file under ``SWAPLESS_HOME`` (never the platform's
registry or the real user's config), so tests and a moved home stay self-contained.
The file is private from its first write, like everything in the home: QSettings
writes a new file with the umask's mode, which the next start reported as a loose file
Swapless itself had made.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from app.core.files import paths
from app.core.files.private_files import PRIVATE_FILE_MODE

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
    # Not written (a read-only home): nothing to protect.
    with contextlib.suppress(OSError):
        os.chmod(state.fileName(), PRIVATE_FILE_MODE)


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
