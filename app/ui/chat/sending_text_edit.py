"""A text box where Enter sends and Shift+Enter starts a new line.

The composer and the editor of a sent message behave the same way, as chat apps do:
`submitted` fires on Enter (or the keypad's Enter) without Shift.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget


class SendingTextEdit(QPlainTextEdit):
    """Plain-text editing; Enter emits `submitted`, Shift+Enter inserts a newline."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setTabChangesFocus(True)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.submitted.emit()
            return
        if enter:
            self.insertPlainText("\n")
            return
        super().keyPressEvent(event)
