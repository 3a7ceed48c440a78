"""The Thinking block above a reasoning model's answer.

While the model thinks: "Thinking… 6 s · 240 tokens" and the thought itself in a muted,
smaller, scrolling area. Once the answer starts (or when a stored reply is shown) it
collapses to one line, "Thought for 14 s · 812 tokens", which expands on a click. A
reply without reasoning never shows it. The text is plain text, never markup.

A long thought is laid out a few pieces of `PIECE_CHARS` per event-loop turn, each
line at most that long (a longer line goes on in the next block): Qt lays out one
block at once, and one line of 1 MB without a space froze the window for minutes
(issue #31, point 7). What `text` returns is the thought as written.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QTextCursor
from PySide6.QtWidgets import QFrame, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

from app.core.text.qt_html_renderer import PIECE_CHARS

THOUGHT_HEIGHT = 140
PIECES_PER_TURN = 4
"""Pieces laid out per event-loop turn (a piece takes milliseconds)."""


def thinking_words(tokens: int, seconds: float, live: bool) -> str:
    """The block's one line: ``Thinking… 6 s · 240 tokens`` or ``Thought for …``."""
    count = f"{tokens:,} token{'s' if tokens != 1 else ''}"
    if live:
        return f"Thinking… {seconds:.0f} s · {count}"
    return f"Thought for {seconds:.0f} s · {count}"


class ThinkingView(QFrame):
    """A collapsible view of a reply's reasoning.

    Args:
        parent: The reply's view.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("thinking")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 4)
        layout.setSpacing(2)
        self.toggle = QToolButton(self)
        self.toggle.setObjectName("thinkingToggle")
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self._on_toggle_toggled)
        layout.addWidget(self.toggle)
        self.thought = QPlainTextEdit(self)
        self.thought.setObjectName("thinkingText")
        self.thought.setReadOnly(True)
        self.thought.setMaximumHeight(THOUGHT_HEIGHT)
        font = self.thought.font()
        font.setPointSizeF(max(font.pointSizeF() * 0.9, 7.0))
        self.thought.setFont(font)
        # Muted: the thought is context for the answer, not the answer.
        self.thought.setStyleSheet("color: palette(placeholder-text);")
        layout.addWidget(self.thought)
        self.live = False
        self.tokens = 0
        self.seconds = 0.0
        self._text = ""
        self._queue: list[str] = []  # pieces not laid out yet
        self._line = 0  # characters in the document's last block
        self.turns = 0  # event-loop turns the last long text took (for tests)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(0)
        self._timer.timeout.connect(self._lay_out_some)
        self.hide()

    @property
    def text(self) -> str:
        """The reasoning shown (as written; long lines are shown broken)."""
        return self._text

    @property
    def pending(self) -> int:
        """Pieces not laid out yet."""
        return len(self._queue)

    @property
    def expanded(self) -> bool:
        """True while the thought itself is visible."""
        return self.thought.isVisibleTo(self)

    def show_live(self, text: str, tokens: int, seconds: float) -> None:
        """Show the thought as it grows, open, following its end."""
        self.live = True
        self.tokens, self.seconds = tokens, seconds
        if text != self.text:
            self._set_text(text)
            bar = self.thought.verticalScrollBar()
            bar.setValue(bar.maximum())
        self.toggle.setText(thinking_words(tokens, seconds, live=True))
        self._set_open(True)
        self.show()

    def show_done(self, text: str, tokens: int, seconds: float) -> None:
        """Show a finished thought, collapsed to its one line (nothing if empty)."""
        self.live = False
        self.tokens, self.seconds = tokens, seconds
        if not text.strip():
            self.hide()
            return
        if text != self.text:
            self._set_text(text)
        self.toggle.setText(thinking_words(tokens, seconds, live=False))
        self._set_open(False)
        self.show()

    def _set_text(self, text: str) -> None:
        """Show ``text``: only its new end when it grows (a live thought), else anew;
        in pieces, the first ones now and the rest over the next turns."""
        if text.startswith(self._text) and self._text:
            added = text[len(self._text) :]
        else:
            self._queue.clear()
            self.thought.clear()
            self._line = 0
            self.turns = 0
            added = text
        self._text = text
        self._queue += self._pieces(added)
        self._lay_out_some()

    def _pieces(self, text: str) -> list[str]:
        """``text`` cut so that no line of the document passes `PIECE_CHARS` (a line
        break is added where a line would, after a space if there is one near)."""
        pieces: list[str] = []
        line = self._line
        start = 0
        while start < len(text):
            room = PIECE_CHARS - line
            newline = text.find("\n", start, start + room)
            if newline >= 0:
                end, line, cut = newline + 1, 0, ""
            elif len(text) - start <= room:
                end, line, cut = len(text), line + len(text) - start, ""
            else:
                space = text.rfind(" ", start + room // 2, start + room)
                end = space + 1 if space >= 0 else start + room
                line, cut = 0, "\n"
            pieces.append(text[start:end] + cut)
            start = end
        self._line = line
        return pieces

    def _lay_out_some(self) -> None:
        """Append a few pieces; come back on the next event-loop turn for more."""
        batch, self._queue = (
            self._queue[:PIECES_PER_TURN],
            self._queue[PIECES_PER_TURN:],
        )
        if batch:
            cursor = QTextCursor(self.thought.document())
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText("".join(batch))
            self.turns += 1
        if self._queue:
            self._timer.start()
        elif self.live:
            bar = self.thought.verticalScrollBar()
            bar.setValue(bar.maximum())

    def _set_open(self, opened: bool) -> None:
        self.toggle.blockSignals(True)
        self.toggle.setChecked(opened)
        self.toggle.blockSignals(False)
        self._on_toggle_toggled(opened)

    def _on_toggle_toggled(self, checked: bool) -> None:
        self.toggle.setArrowType(
            Qt.ArrowType.DownArrow if checked else Qt.ArrowType.RightArrow
        )
        self.thought.setVisible(checked)
