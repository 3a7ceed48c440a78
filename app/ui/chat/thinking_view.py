"""The Thinking block above a reasoning model's answer.

While the model thinks: "Thinking… 6 s · 240 tokens" and the thought itself in a muted,
smaller, scrolling area. Once the answer starts (or when a stored reply is shown) it
collapses to one line, "Thought for 14 s · 812 tokens", which expands on a click. A
reply without reasoning never shows it. The text is plain text, never markup.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QPlainTextEdit, QToolButton, QVBoxLayout, QWidget

THOUGHT_HEIGHT = 140


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
        self.hide()

    @property
    def text(self) -> str:
        """The reasoning shown."""
        return self.thought.toPlainText()

    @property
    def expanded(self) -> bool:
        """True while the thought itself is visible."""
        return self.thought.isVisibleTo(self)

    def show_live(self, text: str, tokens: int, seconds: float) -> None:
        """Show the thought as it grows, open, following its end."""
        self.live = True
        self.tokens, self.seconds = tokens, seconds
        if text != self.text:
            self.thought.setPlainText(text)
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
            self.thought.setPlainText(text)
        self.toggle.setText(thinking_words(tokens, seconds, live=False))
        self._set_open(False)
        self.show()

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
