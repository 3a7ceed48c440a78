"""The context meter follows the open conversation, even while the model works elsewhere.

Measurements (`ContextState`) come from the core through the worker, for whichever
conversation asked; the controller keeps the newest one per conversation and shows the
open conversation's. Opening a conversation shows its last known state at once (said to
be the last measurement) and asks for a fresh one; while a reply streams in another
conversation that request waits behind it, so the meter says so instead of going blank
or showing the other conversation's numbers. `request_state` is the one place that asks:
when the core can measure from any thread, it can answer directly.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

WAITING = "measured after the reply being written elsewhere"
LAST_KNOWN = "last measured"


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
        self._states: dict[int | None, object] = {}
        self._waiting: set[int | None] = set()
        self.request_state: Callable[[int | None, object], None] = (
            worker.measure_context
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
        if self._models.info is None:
            return
        cid = self._current.conversation_id
        self._waiting.add(cid)
        self.request_state(cid, self._current.preset() if cid is None else None)
        self._show()

    def _show(self) -> None:
        cid = self._current.conversation_id
        state = self._states.get(cid)
        if self._models.info is None:
            self._meter.set_state(None)
        elif cid not in self._waiting:
            self._meter.set_state(state)
        elif self._turns.busy and self._turns.live_conversation_id != cid:
            self._meter.set_state(state, LAST_KNOWN if state else WAITING)
        else:
            self._meter.set_state(state, LAST_KNOWN if state else "measuring…")

    def _on_worker_context_measured(self, state) -> None:
        self._states[state.conversation_id] = state
        self._waiting.discard(state.conversation_id)
        if state.conversation_id == self._current.conversation_id:
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
