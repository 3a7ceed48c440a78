"""The card of one tool call in the chat: what was called, with what, and what came back.

While the user is asked, the card shows the server, the tool and the arguments with
three buttons (Allow once, Always for this conversation, Deny). Once answered and the
call is done it collapses to one line — tool, outcome, time — that opens the details
(arguments, result or error, and the note when the result was cut to fit). A view only:
the answer goes out as `answered`, the worker decides the rest.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.core.mcp.consent import Decision
from app.core.store.calls.tool_calls import StoredToolCall
from app.ui.common.icons import set_icon
from app.ui.common.look import SPACE

# Characters of a result shown in the card (the whole result is in the export).
SHOWN_RESULT_CHARS = 4000


def summary_line(call: StoredToolCall) -> str:
    """The collapsed card's one line: ``tools · secret_word — result · 0.21 s``."""
    where = f"{call.server} · " if call.server else ""
    if call.decision == "deny":
        outcome = "denied"
    elif call.is_error:
        outcome = "error"
    else:
        outcome = "result"
    cut = " · cut to fit" if call.cut_note else ""
    return f"{where}{call.tool} — {outcome}{cut} · {call.seconds:.2f} s"


class ToolCallCard(QFrame):
    """One call's card; asks for consent when told to.

    Args:
        server: The server that runs the tool.
        tool: The tool's name as the model called it.
        arguments: The arguments as JSON text.
        command: The server's full command (shown while asking).
    """

    answered = Signal(object)  # a Decision

    def __init__(
        self,
        server: str,
        tool: str,
        arguments: str,
        command: str = "",
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.setObjectName("toolCallCard")

        self.call: StoredToolCall | None = None
        layout = QVBoxLayout(self)
        layout.setContentsMargins(SPACE["m"], SPACE["s"], SPACE["m"], SPACE["s"])
        where = f"{server} · " if server else ""
        self.header = QToolButton(self)
        self.header.setAutoRaise(True)
        self.header.setCheckable(True)
        self.header.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        set_icon(self.header, "wrench")
        self.header.setText(f"Tool call: {where}{tool} — running…")
        self.header.toggled.connect(self._on_header_toggled)
        layout.addWidget(self.header)
        self.details = QLabel(self)
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(
            self.details.textInteractionFlags()
            | Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self.details.setText(f"Arguments: {arguments or '{}'}")
        layout.addWidget(self.details)
        self.note = QLabel(self)
        self.note.setObjectName("toolCutNote")
        self.note.setWordWrap(True)
        self.note.hide()
        layout.addWidget(self.note)
        self.question = QLabel(self)
        self.question.setWordWrap(True)
        self.question.setText(
            f"The model wants to call {tool!r} on {server!r}"
            + (f" ({command})" if command else "")
            + ". Allow it?"
        )
        self.question.hide()
        layout.addWidget(self.question)
        row = QHBoxLayout()
        self.buttons: dict[Decision, QPushButton] = {}
        for decision, text in (
            (Decision.ALLOW_ONCE, "Allow once"),
            (Decision.ALLOW_ALWAYS, "Always"),
            (Decision.DENY, "Deny"),
        ):
            button = QPushButton(text, self)
            button.clicked.connect(lambda _=False, d=decision: self._answer(d))
            button.hide()
            row.addWidget(button)
            self.buttons[decision] = button
        row.addStretch(1)
        layout.addLayout(row)
        self._arguments = arguments

    @classmethod
    def from_call(
        cls, call: StoredToolCall, parent: QWidget | None = None
    ) -> ToolCallCard:
        """A card for a stored call (a reopened conversation): collapsed, answered."""
        card = cls(call.server, call.tool, call.arguments, parent=parent)
        card.finish(call)
        return card

    @property
    def asking(self) -> bool:
        """True while the consent buttons wait for the user."""
        return not self.buttons[Decision.DENY].isHidden()

    def ask(self) -> None:
        """Show the question and the three buttons."""
        self.question.show()
        for button in self.buttons.values():
            button.show()

    def _answer(self, decision: Decision) -> None:
        self.question.hide()
        for button in self.buttons.values():
            button.hide()
        self.answered.emit(decision)

    def finish(self, call: StoredToolCall) -> None:
        """Show the outcome and collapse to one line (the header opens the details)."""
        self.call = call
        self.question.hide()
        for button in self.buttons.values():
            button.hide()
        self.header.setText(f"Tool call: {summary_line(call)}")
        shown = call.result
        if len(shown) > SHOWN_RESULT_CHARS:
            shown = shown[:SHOWN_RESULT_CHARS] + " […]"
        label = "Error" if call.is_error else "Result"
        self.details.setText(f"Arguments: {call.arguments or '{}'}\n\n{label}: {shown}")
        self.note.setText(call.cut_note)
        self.header.setChecked(False)
        self._on_header_toggled(False)

    def _on_header_toggled(self, checked: bool) -> None:
        if self.call is None:
            return  # still running: the details stay open
        self.details.setVisible(checked)
        # The cut note is never hidden: nothing is cut silently.
        self.note.setVisible(bool(self.call.cut_note))

    @property
    def collapsed(self) -> bool:
        """True when only the one line (and a cut note) shows."""
        return self.call is not None and self.details.isHidden()
