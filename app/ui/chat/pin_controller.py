"""Pins from the chat: the message's Pin button sets or clears them in the store.

The check and the words are the core's (`app.core.chat.pins`), shared with `swapless
pin`; a refused pin is said in a notice and the button goes back to unpinned.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal

from app.core.chat.pins import pin_message
from app.core.errors import KnownError
from app.core.store import Store
from app.ui.chat.chat_view import ChatView


class PinController(QObject):
    """Applies the chat view's pin toggles to the store.

    Args:
        store: The open store.
        chat_view: The chat, whose messages carry Pin buttons.
    """

    pinned = Signal(str)
    refused = Signal(str)

    def __init__(
        self, store: Store, chat_view: ChatView, parent: QObject | None = None
    ):
        super().__init__(parent)
        self._store = store
        self._chat = chat_view
        chat_view.pin_toggled.connect(self._on_chat_view_pin_toggled)

    def _on_chat_view_pin_toggled(self, message_id: int, pinned: bool) -> None:
        try:
            said = pin_message(self._store, message_id, pinned)
        except KnownError as exc:
            self._show(message_id, not pinned)
            self.refused.emit(str(exc))
            return
        self._show(message_id, pinned)
        self.pinned.emit(said)

    def _show(self, message_id: int, pinned: bool) -> None:
        for view in self._chat.message_views():
            if view.message_id == message_id:
                view.set_pinned(pinned)
