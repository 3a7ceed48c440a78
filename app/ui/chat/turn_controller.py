"""Turns: send, regenerate, edit and resend, stop; the transcript and the reply being written.

The controller owns the one record of the turn in progress (`LiveTurn`: which
conversation, what was asked, the reply so far). The reply's text lives only there: when
another conversation is shown and then this one again, the live reply is shown from it.
The chat view only displays; the composer only reports what was typed. Busy means a live
turn exists; it ends when the worker says the reply finished or failed.

Long-document readings are not turns: they run on their own thread (the
`DocumentController`), and only the conversation being read waits for them
(`blocked`); replies in other conversations go on meanwhile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app.core.errors import KnownError
from app.core.models.model_catalog import has_random_weights
from app.core.notice_words import messages_noun, summary_origin
from app.core.store.conversations import make_title
from app.ui.chat.chat_view import THINKING
from app.ui.common.dialogs import show_error, show_failure

log = logging.getLogger(__name__)

NO_MODEL_REASON = (
    "No model is loaded. Choose one in the model picker above (the reference model "
    "ships with Swapless), or open Models… to download or add one."
)
LOADING_REASON = "Loading the model… you can type meanwhile; sending waits for it."
NEW_CHAT = -1  # the worker's id for a new chat that failed before it was stored


@dataclass
class LiveTurn:
    """The turn being written.

    Attributes:
        kind: ``send``, ``regenerate``, ``edit`` or ``document``.
        conversation_id: Its conversation; None until a new chat is stored.
        request_text: What the user typed (given back if the turn is refused).
        user_text: The user message shown above the reply (None for regenerate).
        reply_text: The reply so far.
        reasoning_text: A reasoning model's thought so far.
        reasoning_chunks: Pieces of thought received (about one per token).
        reasoning_started: ``time.monotonic()`` of the first piece of thought.
        footer: The reply's status line.
        retitle: Re-title the conversation afterwards (its first message was edited).
        left: The user left the new chat this turn started in.
        waiting: The turn waits for other work on the model (a quality check) and its
            footer says so.
    """

    kind: str
    conversation_id: int | None
    request_text: str
    user_text: str | None
    reply_text: str = ""
    reasoning_text: str = ""
    reasoning_chunks: int = 0
    reasoning_started: float = 0.0
    footer: str = THINKING
    retitle: bool = False
    left: bool = False
    waiting: bool = False


class TurnController(QObject):
    """Starts turns, streams them into the chat view and ends them.

    Args:
        store: The open store.
        worker: The generation worker.
        chat_view: The transcript.
        composer: The message box.
        current: The `CurrentConversationController`.
        models: The `ModelController`.
        window: Parent of the dialogs.
    """

    busy_changed = Signal(bool)
    conversation_created = Signal(int)
    live_text_changed = Signal(int, str)  # conversation id, the reply so far
    reply_finished = Signal(int, object)  # conversation id, TurnReport
    reply_failed = Signal(int, object)  # conversation id (-1: new chat), WorkerError
    trimmed = Signal(int, object)  # conversation id, TrimOutcome

    def __init__(self, store, worker, chat_view, composer, current, models, window):
        super().__init__(window)
        self._store = store
        self._worker = worker
        self._chat = chat_view
        self._composer = composer
        self._current = current
        self._models = models
        self._window: QWidget = window
        self.live: LiveTurn | None = None
        self.error_dialog = None
        self._closed = False
        # Why a conversation cannot send now besides a live turn (a document being
        # read in it), or None; the `DocumentController` sets it.
        self.blocked: Callable[[int | None], str | None] = lambda _cid: None
        # Why a turn that starts now waits before its prompt is read (a quality check
        # holds the model thread), or None; the window connects the check's words.
        self.waiting: Callable[[], str | None] = lambda: None
        worker.conversation_started.connect(self._on_worker_conversation_started)
        worker.chunk_received.connect(self._on_worker_chunk_received)
        worker.reasoning_received.connect(self._on_worker_reasoning_received)
        worker.prefill_progressed.connect(self._on_worker_prefill_progressed)
        worker.trim_started.connect(self._on_worker_trim_started)
        worker.trim_happened.connect(self._on_worker_trim_happened)
        worker.generation_finished.connect(self._on_worker_generation_finished)
        worker.generation_failed.connect(self._on_worker_generation_failed)
        composer.send_requested.connect(self.send)
        composer.stop_requested.connect(self.stop)
        chat_view.edit_submitted.connect(self.edit_and_resend)
        chat_view.regenerate_requested.connect(self.regenerate)
        current.opened.connect(self._on_current_opened)
        for signal in (models.loading_started, models.loaded, models.load_failed):
            signal.connect(self.refresh_composer)

    # -- state -------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while a reply (or a document's answer) is being written."""
        return self.live is not None

    @property
    def live_conversation_id(self) -> int | None:
        """The conversation being written to, if it is stored already."""
        return self.live.conversation_id if self.live else None

    def can_start(self) -> bool:
        """True when a turn can start now (a model is loaded, nothing else runs)."""
        return (
            self.live is None
            and not self._closed
            and not self._models.loading
            and self._models.info is not None
        )

    # -- turns -------------------------------------------------------------------------

    def send(self, text: str) -> bool:
        """Send ``text`` in the open conversation (a new one for a new chat)."""
        cid = self._current.conversation_id
        if self.blocked(cid):
            return False
        if not self.begin_turn(LiveTurn("send", cid, text, text)):
            return False
        self._worker.send(cid, text, self._current.preset())
        return True

    def regenerate(self) -> bool:
        """Write the last reply of the open conversation again."""
        cid = self._current.conversation_id
        if cid is None or not self.can_start() or self.blocked(cid):
            return False
        self._chat.remove_last_reply()
        self.begin_turn(LiveTurn("regenerate", cid, "", None))
        self._worker.regenerate(cid)
        return True

    def edit_and_resend(self, message_id: int, text: str) -> bool:
        """Replace a user message (and what followed it) and send it again."""
        cid = self._current.conversation_id
        if cid is None or not self.can_start() or self.blocked(cid):
            return False
        turn = LiveTurn("edit", cid, text, text, retitle=self._titled_after(message_id))
        self._chat.remove_from(message_id)
        self.begin_turn(turn)
        self._worker.edit_and_resend(cid, message_id, text)
        return True

    def stop(self) -> None:
        """Stop the reply being written (the core keeps it, marked stopped)."""
        if self.live is not None:
            self._worker.cancel()
            self.live.waiting = False  # "Stopping…" stays until the turn ends
            self.set_footer("Stopping…")

    def stop_in(self, conversation_id: int) -> None:
        """Stop the reply if it is being written in ``conversation_id``."""
        if self.live_conversation_id == conversation_id:
            self.stop()

    def begin_turn(self, turn: LiveTurn) -> bool:
        """Start showing ``turn``; False when a turn cannot start now."""
        if not self.can_start():
            return False
        if words := self.waiting():
            turn.footer, turn.waiting = words, True
        self.live = turn
        self._chat.start_live_turn(turn.user_text)
        self._chat.set_live_footer(turn.footer)
        self.busy_changed.emit(True)
        self.refresh_composer()
        return True

    def end_turn(self, conversation_id: int) -> None:
        """The turn ended: show what the store holds now."""
        self.live = None
        if conversation_id == self._current.conversation_id:
            self.show_current()
            self._chat.scroll_to_bottom()
        self.busy_changed.emit(False)
        self.refresh_composer()

    def close(self) -> None:
        """The window closed: forget the turn in progress and start no other."""
        self.live = None
        self._closed = True

    def set_footer(self, text: str) -> None:
        """Set the status line of the reply being written."""
        if self.live is None:
            return
        self.live.footer = text
        if self._shows_live():
            self._chat.set_live_footer(text)

    # -- the transcript ----------------------------------------------------------------

    def show_current(self, keep_live: bool = False) -> None:
        """Show the open conversation as stored (and the live turn if it is its own)."""
        cid = self._current.conversation_id
        if cid is None:
            if not keep_live:
                self._chat.clear()
                if self.live is not None and self.live.conversation_id is None:
                    self._show_live()
            return
        try:
            messages = self._store.messages(cid, include_trimmed=True)
            summaries = self._store.summaries(cid)
        except KnownError as exc:
            show_error(self._window, "Cannot read the conversation", str(exc))
            return
        origins = self._summary_origins(cid, summaries)
        self._chat.show_conversation(
            messages,
            summaries,
            keep_live=keep_live,
            origins=origins,
            tool_calls=self._store.tool_calls(cid),
        )
        if not keep_live and self.live is not None and self.live.conversation_id == cid:
            self._show_live()

    def refresh_composer(self) -> None:
        """Put the composer and the chat's buttons in the state that fits."""
        if self._models.loading:
            self._composer.set_disabled(LOADING_REASON)
            self._composer.edit.setEnabled(True)
        elif self._models.info is None:
            self._composer.set_disabled(NO_MODEL_REASON)
        elif self.busy and self._shows_live():
            self._composer.set_busy()
        elif reason := self.blocked(self._current.conversation_id):
            self._composer.set_disabled(reason)
            self._composer.edit.setEnabled(True)  # typing the next message is fine
        elif self.busy:  # a reply in another conversation: this one waits for it
            self._composer.set_busy()
        else:
            self._composer.set_ready()
        self._chat.set_busy(self.busy)

    def _show_live(self) -> None:
        live = self.live
        assert live is not None, "callers check that a turn is live"
        self._chat.start_live_turn(None, live.reply_text)
        self._chat.set_live_footer(live.footer)

    def _shows_live(self) -> bool:
        live = self.live
        if live is None:
            return False
        if live.conversation_id is None:
            return not live.left and self._current.conversation_id is None
        return live.conversation_id == self._current.conversation_id

    def _summary_origins(self, cid: int, summaries) -> dict[int, str]:
        if not summaries:
            return {}
        conversation = self._store.get_conversation(cid)
        mode = conversation.settings.get("summary_mode", "model")
        demo = bool(conversation.model) and has_random_weights(conversation.model)
        return {s.id: summary_origin(s.method, mode, demo) for s in summaries}

    def _titled_after(self, message_id: int) -> bool:
        """True when the title was made from this (first) message, not typed by hand."""
        cid = self._current.conversation_id
        try:
            users = [m for m in self._store.messages(cid) if m.role == "user"]
            title = self._store.get_conversation(cid).title
        except KnownError:
            return False
        return (
            bool(users)
            and users[0].id == message_id
            and (title == make_title(users[0].content))
        )

    # -- worker signals ----------------------------------------------------------------

    def _on_current_opened(self, _conversation_id, reveal_message) -> None:
        if self.live is not None and self.live.conversation_id is None:
            self.live.left = True  # the user left the new chat being written
        self.show_current()
        if reveal_message is not None:
            self._chat.reveal_message(reveal_message)
        else:
            self._chat.scroll_to_bottom()

    def _on_worker_conversation_started(self, conversation_id: int) -> None:
        live = self.live
        if live is not None and live.conversation_id is None:
            live.conversation_id = conversation_id
            if not live.left:
                self._current.adopt(conversation_id)
        self.conversation_created.emit(conversation_id)

    def _on_worker_chunk_received(self, conversation_id: int, text: str) -> None:
        live = self.live
        if live is None or live.conversation_id != conversation_id:
            return
        live.reply_text += text
        if self._shows_live():
            if live.reasoning_chunks and live.reply_text == text:
                # The answer began: the thought collapses to its one line.
                self._chat.set_live_reasoning(
                    live.reasoning_text,
                    live.reasoning_chunks,
                    time.monotonic() - live.reasoning_started,
                    done=True,
                )
            self._chat.set_live_text(live.reply_text)
        self.live_text_changed.emit(conversation_id, live.reply_text)

    def _on_worker_reasoning_received(self, conversation_id: int, text: str) -> None:
        live = self.live
        if live is None or live.conversation_id != conversation_id:
            return
        if not live.reasoning_chunks:
            live.reasoning_started = time.monotonic()
            # The prompt is read: the Thinking block counts from here, and a
            # "Reading the prompt… 100%" left under it would say the opposite.
            self.set_footer("Writing…")
        live.reasoning_text += text
        live.reasoning_chunks += 1
        if self._shows_live():
            self._chat.set_live_reasoning(
                live.reasoning_text,
                live.reasoning_chunks,
                time.monotonic() - live.reasoning_started,
                done=False,
            )

    def refresh_waiting(self, *_args) -> None:
        """Update a waiting turn's footer (the check moved on, or ended)."""
        live = self.live
        if live is None or not live.waiting:
            return
        words = self.waiting()
        if words is None:
            live.waiting = False
            words = THINKING
        self.set_footer(words)

    def _on_worker_prefill_progressed(
        self, conversation_id: int, done: int, total: int
    ) -> None:
        live = self.live
        if total and live is not None and live.conversation_id == conversation_id:
            live.waiting = False
            self.set_footer(f"Reading the prompt… {100 * done // total}%")

    def _on_worker_trim_started(self, conversation_id: int, event) -> None:
        if self.live_conversation_id == conversation_id:
            footer = f"Summarising {messages_noun(event.dropped_messages)}…"
            if words := self.waiting():  # the summary waits for the model too
                footer += f" {words}"
            self.set_footer(footer)

    def _on_worker_trim_happened(self, conversation_id: int, outcome) -> None:
        log.info(
            "conversation %s trimmed: %s messages, %s summary of %s tokens, cache %s "
            "in %.0f ms%s",
            conversation_id,
            outcome.dropped_messages,
            outcome.summary_method,
            outcome.summary_tokens,
            outcome.cache_method,
            outcome.cache_ms,
            f" ({outcome.note})" if outcome.note else "",
        )
        if conversation_id == self._current.conversation_id:
            self.show_current(keep_live=True)
        self.trimmed.emit(conversation_id, outcome)

    def _on_worker_generation_finished(self, conversation_id: int, report) -> None:
        live = self.live
        if live is not None and live.retitle:
            try:
                self._store.auto_title(conversation_id, overwrite=True)
            except KnownError as exc:
                log.warning("re-titling conversation %s: %s", conversation_id, exc)
        self.end_turn(conversation_id)
        if conversation_id == self._current.conversation_id:
            self._current.refresh_title()
        self.reply_finished.emit(conversation_id, report)

    def _on_worker_generation_failed(self, conversation_id: int, error) -> None:
        live, self.live = self.live, None
        shown = conversation_id == NEW_CHAT or (
            conversation_id == self._current.conversation_id
        )
        if shown:
            self.show_current()
            # A refused message was not stored: give it back rather than lose it.
            if (
                live is not None
                and not live.left
                and live.kind in ("send", "edit", "document")
                and not self._was_saved(conversation_id, live.request_text)
                and not self._composer.text().strip()
            ):
                self._composer.set_text(live.request_text)
        self.busy_changed.emit(False)
        self.refresh_composer()
        if not error.known:
            self.error_dialog = show_failure(self._window, "The reply failed", error)
        self.reply_failed.emit(conversation_id, error)

    def _was_saved(self, conversation_id: int, text: str) -> bool:
        if conversation_id is None or conversation_id < 0:
            return False
        try:
            messages = self._store.messages(conversation_id)
        except KnownError:
            return False
        return (
            bool(messages)
            and messages[-1].role == "user"
            and (messages[-1].content == text)
        )
