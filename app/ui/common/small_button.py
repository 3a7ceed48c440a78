"""The small flat buttons of messages and the notice line (Copy, Edit, ‹ ›, ✕)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QToolButton


def small_button(text: str, tooltip: str) -> QToolButton:
    """A flat tool button that shows a pointing hand."""
    button = QToolButton()
    button.setText(text)
    button.setToolTip(tooltip)
    button.setAutoRaise(True)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    return button
