"""The generation worker: the one object of the app that drives the engine and the sessions.

A `GenerationWorker` is a QObject moved to its own QThread. The window asks it for work
through plain methods (`load_model`, `send`, `regenerate`, ...) that emit private request
signals, so the work runs queued, one request at a time, on the worker thread; results
come back as past-tense signals (`model_loaded`, `chunk_received`,
`generation_finished`, ...). The blocking core calls (``Engine.load``,
``ConversationSession.send``) therefore never run on the UI thread, and MLX itself only
runs on the engine's own thread behind them. `cancel` is the one method meant to be
called directly from the UI thread while a request runs: it is thread-safe.

Every chat turn (send, regenerate, edit) is an iterator of the core's frozen events,
relayed here by one loop as signals, with one `CancelToken` per request (created when
the request is made, so a Stop pressed while it is still queued counts too). The numbers of the context meter come from `app.core.budget.context_state`.

Errors: a `KnownError` travels as a `WorkerError` with its message for the user; any other
exception is a bug, logged here with its traceback, and reported as a generic failure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from app.core.cancel import CancelToken
from app.core.chat.sessions import NO_MODEL_MESSAGE, SessionRegistry
from app.core.presets.presets import Preset
from app.ui.chat.tools.tool_consent import ConsentBridge, WindowTools
from app.ui.common.worker_support import WorkerError, park_on_main_thread, worker_error

if TYPE_CHECKING:  # imported on the worker thread, where it is used
    from app.core.chat.turn_events import TurnFinished

log = logging.getLogger(__name__)

__all__ = ["NO_MODEL_MESSAGE", "GenerationWorker", "WorkerError"]


class GenerationWorker(QObject):
    """Owns the engine and the conversation sessions; lives on its own QThread.

    Args:
        store: The open store (thread-safe).
        engine: The engine; the product passes none and gets a real `Engine`. Tests may
            pass a scripted engine with the same interface.
        budget: Budget settings for the device's context limit.
    """

    model_loading_started = Signal(str)
    model_loaded = Signal(object)
    model_load_failed = Signal(object)
    conversation_started = Signal(int)
    turn_started = Signal(int)
    chunk_received = Signal(int, str)
    reasoning_received = Signal(int, str)
    prefill_progressed = Signal(int, int, int)
    trim_started = Signal(int, object)
    trim_happened = Signal(int, object)
    generation_finished = Signal(int, object)
    generation_failed = Signal(int, object)
    preset_applied = Signal(int, object)
    preset_failed = Signal(int, object)
    context_measured = Signal(object)
    tool_call_started = Signal(int, object)
    tool_call_finished = Signal(int, object)
    tool_notice = Signal(int, str)
    consent_requested = Signal(int, object)

    _load_requested = Signal(str)
    _demo_requested = Signal()
    _send_requested = Signal(object, str, object, object)
    _regenerate_requested = Signal(int, object)
    _edit_requested = Signal(int, int, str, object)
    _preset_requested = Signal(int, object)
    _measure_requested = Signal(object, object)
    _forget_requested = Signal(int)
    _settings_requested = Signal(object)
    _park_requested = Signal()
    _tools_reload_requested = Signal()

    def __init__(self, store, engine=None, settings=None):
        super().__init__()
        if settings is None:
            from app.core.settings import AppSettings

            settings = AppSettings()
        if engine is None:
            from app.core.engine.engine import Engine

            engine = Engine.from_settings(settings)
        self.store = store
        self.engine = engine
        self.sessions = SessionRegistry(engine, store)
        self._settings = settings
        self._prefix_configured = False
        # The newest request's token: Stop cancels whatever runs or waits to run.
        self._token_lock = threading.Lock()
        self._token: CancelToken | None = None
        self._parked = False
        # Tools: the consent card's answer reaches the waiting turn through the bridge.
        self._turn_cid = -1
        self.consent = ConsentBridge(
            lambda request: self.consent_requested.emit(self._turn_cid, request),
            self._stopped,
        )
        self.tools = WindowTools(
            self.consent, stored_decisions=self._stored_tool_decisions
        )
        self._load_requested.connect(self._on_load_requested)
        self._demo_requested.connect(self._on_demo_requested)
        self._send_requested.connect(self._on_send_requested)
        self._regenerate_requested.connect(self._on_regenerate_requested)
        self._edit_requested.connect(self._on_edit_requested)
        self._preset_requested.connect(self._on_preset_requested)
        self._measure_requested.connect(self._on_measure_requested)
        self._forget_requested.connect(self._on_forget_requested)
        self._settings_requested.connect(self._on_settings_requested)
        self._park_requested.connect(self._on_park_requested)
        self._tools_reload_requested.connect(self._on_tools_reload_requested)

    # -- requests (any thread; the work runs queued on the worker thread) -------------

    def load_model(self, folder: str) -> None:
        """Load a model folder; answers `model_loaded` or `model_load_failed`."""
        self._load_requested.emit(str(folder))

    def load_demo_model(self) -> None:
        """Build the demo model if needed, then load it."""
        self._demo_requested.emit()

    def send(
        self, conversation_id: int | None, text: str, preset: Preset | None
    ) -> None:
        """Send a user message; None starts a new conversation with ``preset``."""
        self._send_requested.emit(conversation_id, text, preset, self._new_token())

    def regenerate(self, conversation_id: int) -> None:
        """Replace the last reply of a conversation with a new one."""
        self._regenerate_requested.emit(conversation_id, self._new_token())

    def edit_and_resend(self, conversation_id: int, message_id: int, text: str) -> None:
        """Replace a user message (and what followed) and send the new text."""
        self._edit_requested.emit(conversation_id, message_id, text, self._new_token())

    def apply_preset(self, conversation_id: int, preset: Preset) -> None:
        """Use ``preset`` from the conversation's next turn on, and save it with it."""
        self._preset_requested.emit(conversation_id, preset)

    def measure_context(
        self, conversation_id: int | None, preset: Preset | None
    ) -> None:
        """Emit `context_measured` for a conversation (or a new chat with ``preset``)."""
        self._measure_requested.emit(conversation_id, preset)

    def forget_conversation(self, conversation_id: int) -> None:
        """Drop a deleted conversation's session and KV cache."""
        self._forget_requested.emit(conversation_id)

    def apply_settings(self, settings) -> None:
        """Use new app settings (memory budget, prefix-cache disk cap) from now on."""
        self._settings_requested.emit(settings)

    def park(self) -> None:
        """Finish the queued requests, move back to the main thread, stop the thread."""
        self._park_requested.emit()

    def cancel(self) -> None:
        """Stop the newest request soon (thread-safe; call it from the UI thread).

        The token also covers a request still queued and the moments before the engine
        has a reply to stop (while trimming): the reply then stops at once.
        """
        with self._token_lock:
            token = self._token
        if token is not None:
            token.cancel()

    def reload_tools(self) -> None:
        """Read the tool servers and preferences again from the next turn on."""
        self._tools_reload_requested.emit()

    @Slot()
    def _on_tools_reload_requested(self) -> None:
        self.tools.reload()

    def answer_consent(self, decision) -> None:
        """Answer the tool call waiting for consent (thread-safe; a `Decision`)."""
        self.consent.answer(decision)

    def _stored_tool_decisions(
        self, conversation_id: int
    ) -> list[tuple[str, str, str]]:
        """Each stored call's (server, tool, decision): consent given before."""
        return [
            (call.server, call.tool, call.decision)
            for calls in self.store.tool_calls(conversation_id).values()
            for call in calls
        ]

    def _stopped(self) -> bool:
        with self._token_lock:
            token = self._token
        return token is not None and token.cancelled

    def _new_token(self) -> CancelToken:
        token = CancelToken()
        with self._token_lock:
            self._token = token
        return token

    @property
    def pressure(self) -> Callable[[], str]:
        """Returns the system memory pressure level (the app sets its sampler's)."""
        return self.sessions.pressure

    @pressure.setter
    def pressure(self, source: Callable[[], str]) -> None:
        self.sessions.pressure = source

    @property
    def model_info(self):
        """The loaded model's `ModelInfo`, or None."""
        return self.engine.model_info

    # -- model -------------------------------------------------------------------------

    @Slot(str)
    def _on_load_requested(self, folder: str) -> None:
        if self._parked:
            return  # the window has shut down
        self.model_loading_started.emit(folder)
        try:
            info = self._load(folder)
        except Exception as exc:
            self.model_load_failed.emit(self._error(exc, "loading the model"))
            return
        self.model_loaded.emit(info)

    @Slot()
    def _on_demo_requested(self) -> None:
        if self._parked:
            return  # the window has shut down
        self.model_loading_started.emit("demo")
        try:
            self._before_load()
            info = self.engine.load_demo()
        except Exception as exc:
            self.model_load_failed.emit(self._error(exc, "building the demo model"))
            return
        self.model_loaded.emit(info)

    def _load(self, folder: str):
        self._before_load()
        # The engine checks the weights against the memory budget before it allocates.
        return self.engine.load(folder)

    def _before_load(self) -> None:
        self.sessions.clear()
        self._configure_prefix_cache()

    def _configure_prefix_cache(self) -> None:
        """Give the engine's prefix cache the user's disk cap (on the engine thread)."""
        if self._prefix_configured or not hasattr(self.engine, "prefix_cache"):
            return
        from app.core.engine.cache.prefix_cache_settings import PrefixCacheSettings

        cap = self._settings.prefix_cache_disk_cap_bytes
        self.engine.set_prefix_cache_settings(PrefixCacheSettings(disk_cap_bytes=cap))
        self._prefix_configured = True

    @Slot(object)
    def _on_settings_requested(self, settings) -> None:
        if self._parked:
            return  # the window has shut down
        budget_changed = settings.budget() != self._settings.budget()
        cap_changed = (
            settings.prefix_cache_disk_cap_bytes
            != self._settings.prefix_cache_disk_cap_bytes
        )
        self._settings = settings
        try:
            if budget_changed and hasattr(self.engine, "set_budget_settings"):
                self.engine.set_budget_settings(settings.budget())
            if cap_changed:
                self._prefix_configured = False
                if self.engine.model_info is not None:
                    self._configure_prefix_cache()
        except Exception as exc:  # settings still apply from the next load on
            log.warning(
                "applying settings to the engine failed: %s", exc, exc_info=True
            )

    # -- turns -------------------------------------------------------------------------

    @Slot(object, str, object, object)
    def _on_send_requested(self, conversation_id, text: str, preset, token) -> None:
        if self._parked:
            return  # the window has shut down
        cid = conversation_id if conversation_id is not None else -1
        try:
            if conversation_id is None:
                session = self.sessions.start(preset)
                cid = session.conversation_id
                self.conversation_started.emit(cid)
            else:
                session = self.sessions.for_turn(conversation_id)
            self._run_turn(cid, self._with_tools(session).send(text, token))
        except Exception as exc:
            self._fail_turn(cid, exc)

    @Slot(int, object)
    def _on_regenerate_requested(self, conversation_id: int, token) -> None:
        if self._parked:
            return  # the window has shut down
        try:
            session = self.sessions.for_turn(conversation_id)
            session = self._with_tools(session)
            self._run_turn(conversation_id, session.regenerate(token))
        except Exception as exc:
            self._fail_turn(conversation_id, exc)

    @Slot(int, int, str, object)
    def _on_edit_requested(
        self, conversation_id: int, message_id: int, text: str, token
    ) -> None:
        if self._parked:
            return  # the window has shut down
        try:
            session = self.sessions.for_turn(conversation_id)
            session = self._with_tools(session)
            self._run_turn(
                conversation_id, session.edit_and_resend(message_id, text, token)
            )
        except Exception as exc:
            self._fail_turn(conversation_id, exc)

    def _with_tools(self, session):
        """The session with its conversation's tools (the MCP servers it enables)."""
        from app.core.errors import KnownError

        try:
            session.tools = self.tools.setup_for(session.conversation_id)
        except KnownError as exc:
            # A bad server file is a notice; the chat goes on without tools.
            session.tools = None
            self.tool_notice.emit(session.conversation_id, str(exc))
        return session

    def _run_turn(self, cid: int, turn) -> None:
        """Run one chat turn's events to the end; emit its outcome."""
        self._turn_cid = cid
        self.turn_started.emit(cid)
        _, finished = self._relay(cid, turn)
        assert finished is not None, "a turn's events end with its TurnFinished"
        report = finished.report
        self.generation_finished.emit(cid, report)
        self._measure(cid, report)

    def _relay(self, cid: int, events: Iterable) -> tuple[int, TurnFinished | None]:
        """The one loop: pass a run's events on as signals; return (cid, last event).

        The last event is the turn's `TurnFinished`. (Documents are read by the
        `DocumentWorker` on a thread of their own, so other conversations go on.)
        """
        from app.core.chat.turn_events import (
            ToolNotice,
            ToolRunFinished,
            ToolRunStarted,
            Trimmed,
            TrimStarted,
            TurnFinished,
        )
        from app.core.engine.events import GenerationEvent, PrefillProgress

        finished: TurnFinished | None = None
        for event in events:
            if isinstance(event, GenerationEvent):
                if event.text and event.channel == "reasoning":
                    self.reasoning_received.emit(cid, event.text)
                elif event.text:
                    self.chunk_received.emit(cid, event.text)
            elif isinstance(event, PrefillProgress):
                self.prefill_progressed.emit(cid, event.processed, event.total)
            elif isinstance(event, TrimStarted):
                self.trim_started.emit(cid, event)
            elif isinstance(event, Trimmed):
                self.trim_happened.emit(cid, event.outcome)
            elif isinstance(event, ToolRunStarted):
                self.tool_call_started.emit(cid, event)
            elif isinstance(event, ToolRunFinished):
                self.tool_call_finished.emit(cid, event.call)
            elif isinstance(event, ToolNotice):
                self.tool_notice.emit(cid, event.text)
            elif isinstance(event, TurnFinished):
                finished = event
        return cid, finished

    def _fail_turn(self, cid: int, exc: Exception) -> None:
        self.generation_failed.emit(cid, self._error(exc, "generating a reply"))

    # -- presets and context -----------------------------------------------------------

    @Slot(int, object)
    def _on_preset_requested(self, conversation_id: int, preset) -> None:
        if self._parked:
            return  # the window has shut down
        try:
            self.sessions.apply_preset(conversation_id, preset)
        except Exception as exc:
            self.preset_failed.emit(
                conversation_id, self._error(exc, "changing the preset")
            )
            return
        self.preset_applied.emit(conversation_id, preset)
        self._measure(conversation_id)

    @Slot(object, object)
    def _on_measure_requested(self, conversation_id, preset) -> None:
        if self._parked:
            return  # the window has shut down
        if conversation_id is None:
            self._measure(None, preset=preset)
        else:
            self._measure(conversation_id)

    def _measure(self, conversation_id, report=None, preset=None) -> None:
        """Emit `context_measured` for a conversation (None: a new chat with preset)."""
        if self.engine.model_info is None:
            return
        try:
            if conversation_id is None:
                state = self.sessions.new_chat_state(preset)
            else:
                state = self.sessions.context_state(conversation_id, report)
        except Exception as exc:
            # The meter is informative: a failure here must not interrupt the user.
            log.warning("measuring the context failed: %s", exc, exc_info=True)
            return
        self.context_measured.emit(state)

    @Slot(int)
    def _on_forget_requested(self, conversation_id: int) -> None:
        if self._parked:
            return  # the window has shut down
        session = self.sessions.forget(conversation_id)
        if session is not None and self.engine.model_info is not None:
            try:
                self.engine.drop_cache(session.cache_key)
            except Exception as exc:  # a cache that is already gone is fine
                log.info("dropping the cache of %s: %s", conversation_id, exc)

    @Slot()
    def _on_park_requested(self) -> None:
        self._parked = True
        self.tools.close()  # no tool server outlives the window
        park_on_main_thread(self)

    # -- errors ------------------------------------------------------------------------

    def _error(self, exc: BaseException, doing: str) -> WorkerError:
        return worker_error(exc, doing)
