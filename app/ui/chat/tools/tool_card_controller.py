"""Tool-call cards for the turn being written: shown, asked, answered, finished.

The worker reports each call (`tool_call_started`), asks for consent
(`consent_requested`) and reports the outcome (`tool_call_finished`); this controller
puts a `ToolCallCard` below the live reply, shows its buttons when asked and sends the
answer back. A question about a conversation that is not on screen is denied (the
model is told so): a call must never run without the user having seen it.
"""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QWidget

from app.core.chat.tool_setup import ConsentRequest
from app.core.chat.turn_events import ToolRunStarted
from app.core.mcp.consent import Decision
from app.core.store.calls.tool_calls import StoredToolCall
from app.ui.chat.chat_view import ChatView
from app.ui.chat.tools.tool_call_card import ToolCallCard
from app.ui.chat.turn_controller import TurnController


class ToolCardController(QObject):
    """Connects the worker's tool signals to cards in the chat.

    Args:
        worker: The `GenerationWorker`.
        chat_view: The transcript.
        turns: The turn controller (which conversation's turn is on screen).
        parent: The window.
    """

    def __init__(
        self, worker, chat_view: ChatView, turns: TurnController, parent: QWidget
    ):
        super().__init__(parent)
        self._worker = worker
        self._chat = chat_view
        self._turns = turns
        self.cards: dict[str, ToolCallCard] = {}
        worker.tool_call_started.connect(self._on_worker_tool_call_started)
        worker.consent_requested.connect(self._on_worker_consent_requested)
        worker.tool_call_finished.connect(self._on_worker_tool_call_finished)
        worker.tool_notice.connect(self._on_worker_tool_notice)

    def _on_screen(self, conversation_id: int) -> bool:
        live = self._turns.live
        return (
            live is not None
            and live.conversation_id == conversation_id
            and self._turns._shows_live()
        )

    def _on_worker_tool_call_started(self, conversation_id: int, event) -> None:
        assert isinstance(event, ToolRunStarted)
        if not self._on_screen(conversation_id):
            return
        card = ToolCallCard(event.server, event.tool, event.arguments, event.command)
        # Through a slot of this (UI-thread) object: the worker's own thread is
        # blocked waiting for this very answer, so nothing may be queued to it.
        card.answered.connect(self._answer)
        self._chat.add_live_card(card)
        self.cards[event.call_id] = card

    def _answer(self, decision: Decision) -> None:
        self._worker.answer_consent(decision)

    def _on_worker_consent_requested(self, conversation_id: int, request) -> None:
        assert isinstance(request, ConsentRequest)
        card = self.cards.get(request.call_id)
        if card is None or not self._on_screen(conversation_id):
            self._worker.answer_consent(Decision.DENY)
            return
        card.ask()
        self._chat.scroll_to_bottom()

    def _on_worker_tool_call_finished(self, conversation_id: int, call) -> None:
        assert isinstance(call, StoredToolCall)
        card = self.cards.pop(call.call_id, None)
        if card is not None:
            card.finish(call)

    def _on_worker_tool_notice(self, conversation_id: int, text: str) -> None:
        if self._on_screen(conversation_id):
            self._turns.set_footer(text)
