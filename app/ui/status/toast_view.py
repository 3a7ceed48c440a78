"""A toast: a small box floating over the bottom of the chat, e.g. "Deleted … Undo".

It is a child of the area it floats over but not part of any layout, so showing or
hiding it never moves a message. It keeps to the bottom centre of its host when the host
is resized, and says how long its offer lasts. What the action does and when the offer
ends is the controller's business; the toast only shows it.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

MARGIN = 14


class ToastView(QFrame):
    """Text, one action button and a dismiss button, over ``host``'s bottom edge."""

    action_clicked = Signal()
    dismissed = Signal()

    def __init__(self, host: QWidget):
        super().__init__(host)
        self.setObjectName("toast")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.setStyleSheet(
            "QFrame#toast { background: palette(tool-tip-base); "
            "border: 1px solid palette(mid); border-radius: 8px; }"
        )
        self._host = host
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 6, 6, 6)
        self.label = QLabel()
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        layout.addWidget(self.label, 1)
        self.action_button = QPushButton()
        self.action_button.clicked.connect(self.action_clicked)
        layout.addWidget(self.action_button)
        self.close_button = QPushButton("✕")
        self.close_button.setFlat(True)
        self.close_button.setToolTip("Dismiss")
        self.close_button.setFixedWidth(28)
        self.close_button.clicked.connect(self.dismissed)
        layout.addWidget(self.close_button)
        host.installEventFilter(self)
        self.hide()

    def show_toast(self, text: str, action_label: str) -> None:
        """Show ``text`` (plain) with an action button."""
        self.label.setText(text)
        self.action_button.setText(action_label)
        self.adjustSize()
        self._place()
        self.show()
        self.raise_()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._host and event.type() == QEvent.Type.Resize:
            self._place()
        return False

    def _place(self) -> None:
        width = min(self.sizeHint().width(), max(self._host.width() - 2 * MARGIN, 120))
        self.resize(width, self.sizeHint().height())
        self.move(
            (self._host.width() - width) // 2,
            self._host.height() - self.height() - MARGIN,
        )
