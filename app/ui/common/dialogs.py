"""The app's message boxes: errors in words, bugs with details, confirmations.

Every box is opened window-modal with ``open()``, never ``exec()``: the event loop keeps
running (replies keep streaming, the memory gauge keeps moving) and tests can find the
box and press its buttons instead of being blocked by a nested loop. Their text is plain:
messages quote titles, file names and errors from data, which must never become markup.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox, QWidget

from app.core.files import paths


def show_error(
    parent: QWidget | None, title: str, message: str, details: str = ""
) -> QMessageBox:
    """Open an error box with ``message`` (and optional details); return it."""
    box = QMessageBox(
        QMessageBox.Icon.Warning, title, message, QMessageBox.StandardButton.Ok, parent
    )
    box.setObjectName("errorDialog")
    box.setTextFormat(Qt.TextFormat.PlainText)
    if details:
        box.setDetailedText(details)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    box.open()
    return box


def show_failure(parent: QWidget, title: str, error) -> QMessageBox:
    """Show a `WorkerError`: its words for a known error, a bug report otherwise."""
    if error.known:
        return show_error(parent, title, error.message)
    log_hint = f"\n\nLog folder: {paths.logs_dir()}"
    return show_error(parent, title, error.message + log_hint, error.details)


def confirm(
    parent: QWidget,
    title: str,
    message: str,
    confirm_text: str,
    on_confirmed: Callable[[], None],
) -> QMessageBox:
    """Ask a yes/no question; call ``on_confirmed`` if the user agrees. Returns the box."""
    box = QMessageBox(
        QMessageBox.Icon.Question,
        title,
        message,
        QMessageBox.StandardButton.NoButton,
        parent,
    )
    box.setObjectName("confirmDialog")
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    yes = box.addButton(confirm_text, QMessageBox.ButtonRole.DestructiveRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    # A destructive question must not be answered by a stray Enter.
    box.setDefaultButton(cancel)

    def on_finished(_result: int) -> None:
        if box.clickedButton() is yes:
            on_confirmed()

    box.finished.connect(on_finished)
    box.open()
    return box
