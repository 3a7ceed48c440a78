"""The conversation list: what it shows, search, rename, and delete with undo.

A delete asks first, then hides the conversation at once and offers Undo in a toast for
`UNDO_DELETE_MS`; only then (or when the window closes) is it deleted from the store. A
reply still being saved in it is stopped first and the delete waits for it. The list is
read straight from the store, which is quick and thread-safe.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.core.errors import KnownError
from app.core.store.exchange.json_import import IMPORTED_TITLE_SUFFIX
from app.ui.common.dialogs import confirm, show_error
from app.ui.conversations.conversation_list_view import UNTITLED

log = logging.getLogger(__name__)

UNDO_DELETE_MS = 10_000
RETRY_DELETE_MS = 300
SEARCH_LIMIT = 50


class ConversationListController(QObject):
    """Keeps the list in step with the store and acts on it.

    Args:
        store: The open store.
        list_view: The `ConversationListView`.
        toast: The `ToastView` that offers Undo.
        current: The `CurrentConversationController`.
        turns: The `TurnController` (a reply being written blocks its delete).
        worker: The generation worker (it forgets a deleted conversation's cache).
        window: Parent of the dialogs.
    """

    renamed = Signal(int, str)
    delete_committed = Signal(int)

    def __init__(self, store, list_view, toast, current, turns, worker, window):
        super().__init__(window)
        self._store = store
        self._view = list_view
        self._toast = toast
        self._current = current
        self._turns = turns
        self._worker = worker
        self._window: QWidget = window
        self.pending_deletes: dict[int, str] = {}  # id → title, oldest first
        self._timers: dict[int, QTimer] = {}
        self._countdown = QTimer(self)
        self._countdown.setInterval(1000)
        self._countdown.timeout.connect(self._on_countdown_timeout)
        self.confirm_dialog = None
        list_view.conversation_selected.connect(
            self._on_list_view_conversation_selected
        )
        list_view.new_requested.connect(current.new_chat)
        list_view.rename_submitted.connect(self._on_list_view_rename_submitted)
        list_view.delete_requested.connect(self.delete)
        list_view.import_requested.connect(self._on_list_view_import_requested)
        list_view.search_changed.connect(self._on_list_view_search_changed)
        list_view.search_hit_activated.connect(self._on_list_view_search_hit_activated)
        toast.action_clicked.connect(self._on_toast_action_clicked)
        toast.dismissed.connect(self._on_toast_dismissed)
        current.opened.connect(self._on_current_opened)
        current.adopted.connect(self.refresh)
        current.open_failed.connect(self.refresh)
        turns.conversation_created.connect(self.refresh)
        turns.reply_finished.connect(self.refresh)
        turns.reply_failed.connect(self.refresh)

    def refresh(self, *_args) -> None:
        """Show the stored conversations, newest first, minus the ones being deleted."""
        try:
            conversations = [
                c
                for c in self._store.list_conversations()
                if c.id not in self.pending_deletes
            ]
        except KnownError as exc:
            show_error(self._window, "Cannot read conversations", str(exc))
            return
        self._view.set_conversations(conversations, self._current.conversation_id)

    # -- delete with undo --------------------------------------------------------------

    def delete(self, conversation_id: int) -> None:
        """Ask, then delete a conversation (with time to undo)."""
        title = self._title(conversation_id)
        if title is None:
            return
        self.confirm_dialog = confirm(
            self._window,
            "Delete conversation",
            f"Delete “{title}” and all its messages?",
            "Delete",
            lambda: self.delete_with_undo(conversation_id),
        )

    def delete_with_undo(self, conversation_id: int) -> None:
        """Hide a conversation now; delete it when the undo offer ends."""
        title = self._title(conversation_id)
        if title is None:
            return
        self._turns.stop_in(conversation_id)
        self.pending_deletes[conversation_id] = title
        timer = QTimer(self)
        timer.setSingleShot(True)
        timer.timeout.connect(lambda: self.commit(conversation_id))
        timer.start(UNDO_DELETE_MS)
        self._timers[conversation_id] = timer
        if conversation_id == self._current.conversation_id:
            self._current.new_chat()
        self.refresh()
        self._show_toast()

    def undo(self, conversation_id: int) -> None:
        """Bring a conversation being deleted back."""
        if self.pending_deletes.pop(conversation_id, None) is None:
            return
        self._stop_timer(conversation_id)
        self.refresh()
        self._show_toast()

    def commit(self, conversation_id: int) -> None:
        """Delete a conversation whose undo offer ended."""
        if conversation_id not in self.pending_deletes:
            return
        if self._turns.live_conversation_id == conversation_id:
            # Its stopped reply is still being saved; delete right after.
            QTimer.singleShot(
                RETRY_DELETE_MS, self, lambda: self.commit(conversation_id)
            )
            return
        del self.pending_deletes[conversation_id]
        self._stop_timer(conversation_id)
        try:
            self._store.delete_conversation(conversation_id)
        except KnownError as exc:
            log.warning("deleting conversation %s: %s", conversation_id, exc)
        self._worker.forget_conversation(conversation_id)
        self._show_toast()
        self.delete_committed.emit(conversation_id)

    def commit_all(self) -> None:
        """Delete every conversation still waiting (the window is closing)."""
        for conversation_id in list(self.pending_deletes):
            self.commit(conversation_id)

    def _show_toast(self) -> None:
        if not self.pending_deletes:
            self._countdown.stop()
            self._toast.hide()
            return
        newest = list(self.pending_deletes)[-1]
        timer = self._timers[newest]
        seconds = max(1, round(timer.remainingTime() / 1000))
        others = len(self.pending_deletes) - 1
        more = f" (and {others} more)" if others else ""
        self._toast.show_toast(
            f"Deleted “{self.pending_deletes[newest]}”{more}.", f"Undo ({seconds} s)"
        )
        self._countdown.start()

    def _stop_timer(self, conversation_id: int) -> None:
        timer = self._timers.pop(conversation_id, None)
        if timer is not None:
            timer.stop()
            timer.deleteLater()

    def _title(self, conversation_id: int) -> str | None:
        try:
            return self._store.get_conversation(conversation_id).title or UNTITLED
        except KnownError:
            return None

    def _on_countdown_timeout(self) -> None:
        self._show_toast()

    def _on_toast_action_clicked(self) -> None:
        if self.pending_deletes:
            self.undo(list(self.pending_deletes)[-1])

    def _on_toast_dismissed(self) -> None:
        # Dismissing ends the offer: what was waiting is deleted now.
        self.commit_all()

    # -- import ------------------------------------------------------------------------

    def import_file(self, path: str) -> int | None:
        """Import a conversation export (``swapless export``) and open it.

        The copy's title says it was imported, as the CLI's does. A file that is not an
        export, or cannot be read, is refused in words and nothing changes.

        Returns:
            The new conversation's id, or None when refused.
        """
        try:
            data = Path(path).read_bytes()
            result = self._store.import_conversation(
                data, title_suffix=IMPORTED_TITLE_SUFFIX
            )
        except (KnownError, OSError) as error:
            show_error(self._window, "Import conversation", f"{path}: {error}")
            return None
        self.refresh()
        self._current.open(result.conversation_id)
        return result.conversation_id

    def _on_list_view_import_requested(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self._window,
            "Import conversation",
            "",
            "Swapless conversation export (*.json);;All files (*)",
        )
        if path:
            self.import_file(path)

    # -- list and search ---------------------------------------------------------------

    def _on_current_opened(self, conversation_id, _reveal) -> None:
        self._view.select(conversation_id)

    def _on_list_view_conversation_selected(self, conversation_id: int) -> None:
        if conversation_id != self._current.conversation_id:
            self._current.open(conversation_id)

    def _on_list_view_rename_submitted(self, conversation_id: int, title: str) -> None:
        try:
            self._store.rename_conversation(conversation_id, title)
        except KnownError as exc:
            show_error(self._window, "Cannot rename", str(exc))
            return
        if conversation_id == self._current.conversation_id:
            self._current.refresh_title()
        self.renamed.emit(conversation_id, title)

    def _on_list_view_search_changed(self, text: str) -> None:
        try:
            hits = [
                hit
                for hit in self._store.search(text, limit=SEARCH_LIMIT)
                if hit.conversation_id not in self.pending_deletes
            ]
        except KnownError as exc:
            show_error(self._window, "Search failed", str(exc))
            return
        self._view.show_search_results(text, hits)

    def _on_list_view_search_hit_activated(
        self, conversation_id: int, message_id
    ) -> None:
        self._current.open(conversation_id, reveal_message=message_id)
