"""The context meter follows the open conversation, even while the model works elsewhere.

The numbers (`ContextState`) come from the core's `SessionRegistry`, which answers from
any thread without waiting for the engine: opening a conversation measures it on a pool
thread, so its own numbers show within moments even while a reply streams in another
conversation (the worker's queue would hold the question until that reply ends). After
each turn the worker reports the exact numbers from the live cache. The controller keeps
the newest state per conversation and shows the open one's, marked as the last
measurement until the fresh one arrives; a measurement started before a newer one
arrived is dropped, so an old count never replaces a new one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from PySide6.QtCore import QObject

from app.ui.common.background import TaskSet

log = logging.getLogger(__name__)

LAST_KNOWN = "last measured"
MEASURING = "measuring…"


class ContextMeterController(QObject):
    """Feeds the `ContextMeterView` the open conversation's context state.

    Args:
        meter: The view.
        worker: The generation worker (measurements, streamed tokens).
        current: The `CurrentConversationController`.
        models: The `ModelController`.
        turns: The `TurnController`.
        settings: The `SettingsController` (the budget sets the device's limit).
        parent: Owner.
    """

    def __init__(self, meter, worker, current, models, turns, settings, parent=None):
        super().__init__(parent)
        self._meter = meter
        self._current = current
        self._models = models
        self._turns = turns
        self._sessions = worker.sessions
        self._tasks = TaskSet(self)
        self._states: dict[int | None, object] = {}
        self._waiting: set[int | None] = set()
        # Bumped by every state that arrives: a measurement older than it is dropped.
        self._arrivals: dict[int | None, int] = {}
        self.request_state: Callable[[int | None, object], None] = (
            self._measure_in_background
        )
        worker.context_measured.connect(self._on_worker_context_measured)
        worker.chunk_received.connect(self._on_worker_chunk_received)
        current.opened.connect(self._on_current_opened)
        current.adopted.connect(self._on_current_adopted)
        current.preset_changed.connect(self._on_current_preset_changed)
        models.loaded.connect(self._on_models_loaded)
        models.load_failed.connect(self._on_models_load_failed)
        settings.settings_changed.connect(self._on_settings_settings_changed)

    def state(self, conversation_id: int | None):
        """The newest measurement of a conversation (None: a new chat), if any."""
        return self._states.get(conversation_id)

    def measure(self) -> None:
        """Ask for the open conversation's state now."""
        if self._models.info is None or self._models.loading:
            return
        cid = self._current.conversation_id
        self._waiting.add(cid)
        self.request_state(cid, self._current.preset() if cid is None else None)
        self._show()

    def _measure_in_background(self, conversation_id: int | None, preset) -> None:
        sessions = self._sessions
        seen = self._arrivals.get(conversation_id, 0)

        def work(_report):
            if conversation_id is None:
                return sessions.new_chat_state(preset)
            return sessions.context_state(conversation_id)

        def finished(state) -> None:
            if self._arrivals.get(conversation_id, 0) == seen:
                self._on_worker_context_measured(state)

        self._tasks.start(
            work,
            on_finished=finished,
            on_failed=lambda exc: self._on_measure_failed(conversation_id, exc),
        )

    def _on_measure_failed(self, conversation_id, exc: Exception) -> None:
        # The meter is informative: a failed measurement leaves the last one shown.
        log.warning("measuring conversation %s failed", conversation_id, exc_info=exc)
        self._waiting.discard(conversation_id)
        self._show()

    def _show(self) -> None:
        cid = self._current.conversation_id
        state = self._states.get(cid)
        if self._models.info is None:
            self._meter.set_state(None)
        elif cid not in self._waiting:
            self._meter.set_state(state)
        else:
            self._meter.set_state(state, LAST_KNOWN if state else MEASURING)

    def _on_worker_context_measured(self, state) -> None:
        cid = state.conversation_id
        self._states[cid] = state
        self._arrivals[cid] = self._arrivals.get(cid, 0) + 1
        self._waiting.discard(cid)
        if cid == self._current.conversation_id:
            self._show()

    def _on_worker_chunk_received(self, conversation_id: int, _text: str) -> None:
        if conversation_id == self._current.conversation_id:
            self._meter.add_streamed_tokens(1)

    def _on_current_opened(self, conversation_id, _reveal) -> None:
        if conversation_id is None:
            self._states.pop(None, None)  # measured when its preset is set
            self._show()
        else:
            self.measure()

    def _on_current_adopted(self, conversation_id: int) -> None:
        # The new chat's numbers are this conversation's until it is measured.
        if None in self._states:
            self._states.setdefault(conversation_id, self._states.pop(None))

    def _on_current_preset_changed(self, _preset) -> None:
        # A stored conversation is measured again by the worker once it saved it.
        if self._current.conversation_id is None:
            self.measure()

    def _on_settings_settings_changed(self, settings, previous) -> None:
        if settings.budget() != previous.budget():
            self._states.clear()
            self.measure()

    def _on_models_loaded(self, _info) -> None:
        self._states.clear()  # another model counts tokens and bytes differently
        self._waiting.clear()
        self.measure()

    def _on_models_load_failed(self, _error) -> None:
        if self._models.info is None:
            self._states.clear()
            self._waiting.clear()
            self._show()
