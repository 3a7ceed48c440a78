"""The message composer: multi-line input, Enter sends, Shift+Enter adds a line.

It has three states: ready (Send), busy (the button becomes Stop), and disabled with a
reason shown above it (no model loaded yet, a model loading). The text box grows with
its content up to a few lines, then scrolls. Attach… reads a document of any length
(long-document mode); what is typed becomes the question about it.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QGridLayout,
    QLabel,
    QPushButton,
    QWidget,
)

from app.ui.chat.sending_text_edit import SendingTextEdit
from app.ui.common.icons import set_icon
from app.ui.common.look import SPACE

MAX_VISIBLE_LINES = 8
PLACEHOLDER = "Message the model…   (Enter sends, Shift+Enter adds a line)"


class ComposerEdit(SendingTextEdit):
    """The composer's text box: grows with its text up to a few lines."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("composerEdit")
        self.setPlaceholderText(PLACEHOLDER)
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self._fit()

    def _fit(self, *_args) -> None:
        line = self.fontMetrics().lineSpacing()
        lines = max(2, min(MAX_VISIBLE_LINES, self.document().lineCount()))
        margins = self.contentsMargins()
        height = (
            lines * line
            + 2 * int(self.document().documentMargin())
            + margins.top()
            + margins.bottom()
            + 4
        )
        self.setFixedHeight(height)


class ComposerView(QFrame):
    """Input box plus Send/Stop button, and the reason when sending is not possible."""

    send_requested = Signal(str)
    stop_requested = Signal()
    attach_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("composer")
        self._busy = False
        # A grid: the reason and a card above the text box (`add_card`) share its
        # column, so they are exactly as wide as the box they are about.
        layout = QGridLayout(self)
        layout.setContentsMargins(SPACE["xl"], SPACE["s"], SPACE["xl"], SPACE["m"])
        layout.setHorizontalSpacing(SPACE["s"])
        layout.setVerticalSpacing(SPACE["xs"])
        self._grid = layout
        self.reason_label = QLabel()
        self.reason_label.setObjectName("composerReason")
        self.reason_label.setWordWrap(True)
        self.reason_label.hide()
        layout.addWidget(self.reason_label, 0, 0, 1, 3)
        self.attach_button = QPushButton("Attach…")
        set_icon(self.attach_button, "paperclip")
        self.attach_button.setObjectName("attachButton")
        self.attach_button.setToolTip(
            "Read a text or Markdown file, however long, and answer about it (what you "
            "typed is the question; empty asks for a summary)"
        )
        self.attach_button.clicked.connect(self.attach_requested)
        layout.addWidget(self.attach_button, 2, 0, Qt.AlignmentFlag.AlignBottom)
        self.edit = ComposerEdit(self)
        self.edit.submitted.connect(self._on_edit_submitted)
        layout.addWidget(self.edit, 2, 1)
        layout.setColumnStretch(1, 1)
        self.button = QPushButton("Send")
        # The one primary (accent) button of the window.
        self.button.setObjectName("primary")
        set_icon(self.button, "send", on_accent=True)
        self.button.setMinimumWidth(84)
        self.button.clicked.connect(self._on_button_clicked)
        layout.addWidget(self.button, 2, 2, Qt.AlignmentFlag.AlignBottom)

    def add_card(self, card: QWidget) -> None:
        """Show ``card`` (the document being read) right above the text box, as wide."""
        self._grid.addWidget(card, 1, 1)

    @property
    def busy(self) -> bool:
        """True while a reply is being written (the button stops it)."""
        return self._busy

    def text(self) -> str:
        """The text typed so far."""
        return self.edit.toPlainText()

    def take_text(self) -> str:
        """Return the typed text (stripped) and empty the box."""
        text = self.edit.toPlainText().strip()
        self.edit.clear()
        return text

    def set_text(self, text: str) -> None:
        """Put text in the box (e.g. a refused message, so it is not lost)."""
        self.edit.setPlainText(text)
        cursor = self.edit.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.edit.setTextCursor(cursor)

    def set_ready(self) -> None:
        """Sending is possible."""
        self._busy = False
        self.reason_label.hide()
        self.edit.setEnabled(True)
        self.button.setText("Send")
        set_icon(self.button, "send", on_accent=True)
        self.button.setToolTip("Send (Enter)")
        self.button.setEnabled(True)
        self.attach_button.setEnabled(True)

    def set_busy(self) -> None:
        """A reply is being written: the button stops it; typing the next one is fine."""
        self._busy = True
        self.reason_label.hide()
        self.edit.setEnabled(True)
        self.button.setText("Stop")
        set_icon(self.button, "square", on_accent=True)
        self.button.setToolTip("Stop the reply (Esc)")
        self.button.setEnabled(True)
        self.attach_button.setEnabled(False)

    def set_disabled(self, reason: str) -> None:
        """Sending is not possible, and why."""
        self._busy = False
        self.reason_label.setText(reason)
        self.reason_label.show()
        self.edit.setEnabled(False)
        self.button.setText("Send")
        self.button.setEnabled(False)
        self.attach_button.setEnabled(False)

    def focus(self) -> None:
        """Put the keyboard focus in the text box."""
        self.edit.setFocus()

    def _on_edit_submitted(self) -> None:
        if self._busy or not self.button.isEnabled():
            return
        text = self.edit.toPlainText().strip()
        if not text:
            return
        self.edit.clear()
        self.send_requested.emit(text)

    def _on_button_clicked(self) -> None:
        if self._busy:
            self.stop_requested.emit()
        else:
            self._on_edit_submitted()
