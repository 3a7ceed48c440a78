"""The notice area: one line, always the same height, at the top of the status panel.

Banners that stacked above the chat and hid themselves moved the messages under the
pointer (a click meant for one message's Copy landed on another's). Here a notice only
changes the text of a line that is always there: nothing around it moves. It shows one
notice at a time (the `NoticesController` decides which and when), with a button when
there is something to do, a dismiss button, and arrows when several are waiting. The
text is plain and elided; the whole of it is in the tooltip.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QWidget,
)

from app.ui.common.elided_label import ElidedLabel
from app.ui.common.plain_text import plain_tooltip
from app.ui.common.small_button import small_button

KIND_COLOURS = {
    # (marker, background) readable on light and dark palettes
    "info": ("#0969da", "rgba(9, 105, 218, 0.10)"),
    "warning": ("#bf8700", "rgba(212, 167, 44, 0.16)"),
    "error": ("#cf222e", "rgba(207, 34, 46, 0.13)"),
}


class NoticeAreaView(QFrame):
    """One notice line: marker, text, position, action, dismiss."""

    action_clicked = Signal(str)
    dismissed = Signal(str)
    previous_requested = Signal()
    next_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("noticeArea")
        self.key: str | None = None
        self.kind: str | None = None
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 4, 2)
        layout.setSpacing(6)
        self.marker = QLabel("●")
        layout.addWidget(self.marker)
        self.text_label = ElidedLabel()
        self.text_label.setObjectName("noticeText")
        self.text_label.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed
        )
        layout.addWidget(self.text_label, 1)
        self.previous_button = small_button("‹", "Previous notice")
        self.previous_button.clicked.connect(self.previous_requested)
        self.position_label = QLabel()
        self.position_label.setObjectName("noticePosition")
        self.next_button = small_button("›", "Next notice")
        self.next_button.clicked.connect(self.next_requested)
        for widget in (self.previous_button, self.position_label, self.next_button):
            layout.addWidget(widget)
        self.action_button = QPushButton()
        self.action_button.setObjectName("noticeAction")
        self.action_button.clicked.connect(self._on_action_button_clicked)
        layout.addWidget(self.action_button)
        self.close_button = small_button("✕", "Dismiss this notice")
        self.close_button.clicked.connect(self._on_close_button_clicked)
        layout.addWidget(self.close_button)
        # The height of a line with a button, whether or not one is shown now.
        self.setFixedHeight(self.action_button.sizeHint().height() + 6)
        self.clear()

    @property
    def text(self) -> str:
        """The notice shown, as plain text (empty when there is none)."""
        return self.text_label.full_text

    def show_notice(
        self,
        key: str,
        kind: str,
        text: str,
        action_label: str | None = None,
        position: tuple[int, int] = (1, 1),
    ) -> None:
        """Show one notice.

        Args:
            key: Its key (sent back by `action_clicked` and `dismissed`).
            kind: ``info``, ``warning`` or ``error``.
            text: Plain text.
            action_label: The action button's text, or None for no button.
            position: (this notice's number, how many there are).
        """
        self.key, self.kind = key, kind
        marker, background = KIND_COLOURS[kind]
        self.setStyleSheet(
            f"QFrame#noticeArea {{ background: {background}; border-radius: 4px; }}"
        )
        self.marker.setStyleSheet(f"color: {marker};")
        self.marker.show()
        self.text_label.set_plain(text)
        self.setToolTip(plain_tooltip(text))
        self.action_button.setText(action_label or "")
        self.action_button.setVisible(action_label is not None)
        self.close_button.show()
        number, count = position
        self.position_label.setText(f"{number}/{count}")
        for widget in (self.previous_button, self.position_label, self.next_button):
            widget.setVisible(count > 1)

    def clear(self) -> None:
        """Show nothing (the line keeps its height)."""
        self.key = self.kind = None
        self.setStyleSheet("QFrame#noticeArea { background: transparent; }")
        self.text_label.set_plain("")
        self.setToolTip("")
        for widget in (
            self.marker,
            self.previous_button,
            self.position_label,
            self.next_button,
            self.action_button,
            self.close_button,
        ):
            widget.hide()

    def _on_action_button_clicked(self) -> None:
        if self.key is not None:
            self.action_clicked.emit(self.key)

    def _on_close_button_clicked(self) -> None:
        if self.key is not None:
            self.dismissed.emit(self.key)
