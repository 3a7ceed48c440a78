"""The "Recalled 2 earlier messages" chip on a user message, opening the originals.

Recall put trimmed messages back, word for word, before this message; the chip says
how many, and opens them read-only so the user sees exactly what the model was given.
"""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QLabel, QToolButton, QVBoxLayout, QWidget

from app.core.notice_words import messages_noun
from app.core.store.records import RecalledMessage


def chip_text(recalled: tuple[RecalledMessage, ...]) -> str:
    """``Recalled 2 earlier messages`` (and whether one was cut to fit)."""
    text = f"Recalled {messages_noun(len(recalled))}"
    if any(r.cut for r in recalled):
        text += " (one cut to fit)"
    return text


class RecallChipView(QFrame):
    """A toggle chip and, when open, the recalled messages as they were sent."""

    def __init__(
        self, recalled: tuple[RecalledMessage, ...], parent: QWidget | None = None
    ):
        super().__init__(parent)
        self.setObjectName("recallChip")
        self.recalled = recalled
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.button = QToolButton(self)
        self.button.setText(chip_text(recalled))
        self.button.setCheckable(True)
        self.button.setAutoRaise(True)
        self.button.setToolTip(
            "Trimmed messages this one needed, put back word for word before it"
        )
        self.button.toggled.connect(self._on_button_toggled)
        layout.addWidget(self.button)
        self.originals = QLabel(self)
        self.originals.setWordWrap(True)
        self.originals.setText(
            "\n".join(
                f"{'You' if r.role == 'user' else 'Assistant'} (message "
                f"{r.message_id}): {r.text}" + (" […]" if r.cut else "")
                for r in recalled
            )
        )
        self.originals.hide()
        layout.addWidget(self.originals)

    def _on_button_toggled(self, checked: bool) -> None:
        self.originals.setVisible(checked)
