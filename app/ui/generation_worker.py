"""The generation worker: the one object of the app that drives the engine and the sessions.

A `GenerationWorker` is a QObject moved to its own QThread. The window asks it for work
through plain methods (`load_model`, `send`, `regenerate`, ...) that emit private request
signals, so the work runs queued, one request at a time, on the worker thread; results
come back as past-tense signals (`model_loaded`, `chunk_received`,
`generation_finished`, ...). The blocking core calls (``Engine.load``,
``ConversationSession.send``) therefore never run on the UI thread, and MLX itself only
runs on the engine's own thread behind them. `cancel` is the one method meant to be
called directly from the UI thread while a request runs: it is thread-safe.

Errors: a `KnownError` travels as a `WorkerError` with its message for the user; any other
exception is a bug, logged here with its traceback, and reported as a generic failure.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal, Slot

from app.core.errors import KnownError, SettingsError
from app.core.presets import Preset, get_preset

log = logging.getLogger(__name__)

NO_MODEL_MESSAGE = (
    "No model is loaded. Pick one at the top of the window or open Models…"
)


@dataclass(frozen=True)
class WorkerError:
    """A failure on the worker thread, ready to show.

    Attributes:
        message: For the user: the `KnownError`'s words, or a generic sentence for a bug.
        known: True for a `KnownError` (an environment fault or a refusal), False for a bug.
        details: The traceback of a bug, empty otherwise.
    """

    message: str
    known: bool
    details: str = ""


@dataclass(frozen=True)
class ContextState:
    """What the context meter shows for one conversation.

    Attributes:
        conversation_id: The conversation, or None for a chat not started yet.
        tokens: Tokens the conversation holds in the KV cache (or would, once sent).
        effective_limit: The limit in force: the preset's, or the device's if smaller.
        preset_limit: The preset's own max_context.
        kv_bytes: Bytes of KV cache for those tokens at the preset's precision.
        kv_bits: That precision.
        trims: Summaries written for this conversation so far.
        next_trim_at: Tokens held at which the next turn will trim first (it leaves
            room for a whole reply of max_tokens).
        exact: True when measured on the live cache, False when estimated from the
            rendered prompt.
    """

    conversation_id: int | None
    tokens: int
    effective_limit: int
    preset_limit: int
    kv_bytes: int
    kv_bits: int
    trims: int
    next_trim_at: int
    exact: bool


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
    prefill_progressed = Signal(int, int, int)
    trim_happened = Signal(int, object)
    generation_finished = Signal(int, object)
    generation_failed = Signal(int, object)
    preset_applied = Signal(int, object)
    preset_failed = Signal(int, object)
    context_measured = Signal(object)
    document_started = Signal(int, object)
    document_progressed = Signal(int, object)
    document_finished = Signal(int, object)

    _load_requested = Signal(str)
    _demo_requested = Signal()
    _send_requested = Signal(object, str, object)
    _document_requested = Signal(object, str, str, object)
    _regenerate_requested = Signal(int)
    _edit_requested = Signal(int, int, str)
    _preset_requested = Signal(int, object)
    _measure_requested = Signal(object, object)
    _forget_requested = Signal(int)
    _settings_requested = Signal(object)
    _park_requested = Signal()

    def __init__(self, store, engine=None, settings=None):
        super().__init__()
        if settings is None:
            from app.core.settings import AppSettings

            settings = AppSettings()
        if engine is None:
            from app.core.engine.engine import Engine
            from app.core.engine.prefix_cache_settings import PrefixCacheSettings

            # The prefix cache is created later, on the engine's thread: its module
            # imports MLX, which must not happen on the UI thread.
            engine = Engine(
                budget_settings=settings.budget(),
                prefix_cache_settings=PrefixCacheSettings(
                    disk_cap_bytes=settings.prefix_cache_disk_cap_bytes
                ),
            )
        self.store = store
        self.engine = engine
        self.pressure: Callable[[], str] = lambda: "normal"
        self._settings = settings
        self._prefix_configured = False
        self._sessions: dict[int, object] = {}
        self._cancel = threading.Event()
        self._active_lock = threading.Lock()
        self._active_session = None
        self._active_runner = None
        self._parked = False
        self._load_requested.connect(self._on_load_requested)
        self._document_requested.connect(self._on_document_requested)
        self._demo_requested.connect(self._on_demo_requested)
        self._send_requested.connect(self._on_send_requested)
        self._regenerate_requested.connect(self._on_regenerate_requested)
        self._edit_requested.connect(self._on_edit_requested)
        self._preset_requested.connect(self._on_preset_requested)
        self._measure_requested.connect(self._on_measure_requested)
        self._forget_requested.connect(self._on_forget_requested)
        self._settings_requested.connect(self._on_settings_requested)
        self._park_requested.connect(self._on_park_requested)

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
        self._send_requested.emit(conversation_id, text, preset)

    def read_document(
        self, conversation_id: int | None, path: str, question: str, preset: Preset
    ) -> None:
        """Read a document into a conversation (None: a new one) and answer about it.

        The long-document runner keeps the KV cache to one segment plus notes; progress
        comes as `document_started`, `document_progressed`, `chunk_received` (the
        answer) and `document_finished`.
        """
        self._document_requested.emit(conversation_id, str(path), question, preset)

    def regenerate(self, conversation_id: int) -> None:
        """Replace the last reply of a conversation with a new one."""
        self._regenerate_requested.emit(conversation_id)

    def edit_and_resend(self, conversation_id: int, message_id: int, text: str) -> None:
        """Replace a user message (and what followed) and send the new text."""
        self._edit_requested.emit(conversation_id, message_id, text)

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
        """Stop the reply in progress soon (thread-safe; call it from the UI thread).

        The flag also covers the moments before the engine has a reply to stop (while
        trimming): the first token then stops it.
        """
        self._cancel.set()
        with self._active_lock:
            session, runner = self._active_session, self._active_runner
        if session is not None:
            session.cancel()
        if runner is not None:
            runner.cancel()

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
            from app.core.engine.demo_model import ensure_demo_model

            # Building writes MLX arrays: it runs on the engine's thread like all MLX.
            folder = self.engine.submit(ensure_demo_model).result()
            info = self._load(str(folder))
        except Exception as exc:
            self.model_load_failed.emit(self._error(exc, "building the demo model"))
            return
        self.model_loaded.emit(info)

    def _load(self, folder: str):
        self._sessions.clear()
        self._configure_prefix_cache()
        # The engine checks the weights against the memory budget before it allocates.
        return self.engine.load(folder)

    def _configure_prefix_cache(self) -> None:
        """Give the engine's prefix cache the user's disk cap (on the engine thread)."""
        if self._prefix_configured or not hasattr(self.engine, "prefix_cache"):
            return
        from app.core.engine.prefix_cache_settings import PrefixCacheSettings

        cap = self._settings.prefix_cache_disk_cap_bytes
        self.engine.set_prefix_cache_settings(PrefixCacheSettings(disk_cap_bytes=cap))
        self._prefix_configured = True

    def device_limit(self, bits: int) -> int | None:
        """The device's max safe context at ``bits`` for the loaded model, if known."""
        limit = getattr(self.engine, "max_safe_context", None)
        return limit(bits) if limit is not None else None

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

    def _session(self, conversation_id: int):
        from app.core.chat.conversation_session import ConversationSession

        session = self._sessions.get(conversation_id)
        if session is not None:
            return session
        kwargs = {"pressure": self.pressure, "device_limit": self.device_limit}
        try:
            session = ConversationSession(
                self.engine, self.store, conversation_id, **kwargs
            )
        except SettingsError as exc:
            # Settings saved by an older or hand-edited file: continue with the default
            # preset rather than refuse to open the conversation.
            log.warning(
                "conversation %s: %s; using the default preset", conversation_id, exc
            )
            preset = get_preset("chat")
            self.store.update_conversation(
                conversation_id,
                preset=preset.name,
                settings=preset.to_dict(),
                system_prompt=preset.system_prompt,
            )
            session = ConversationSession(
                self.engine, self.store, conversation_id, **kwargs
            )
        self._sessions[conversation_id] = session
        return session

    def _require_model(self):
        info = self.engine.model_info
        if info is None:
            raise KnownError(NO_MODEL_MESSAGE)
        return info

    @Slot(object, str, object)
    def _on_send_requested(self, conversation_id, text: str, preset) -> None:
        if self._parked:
            return  # the window has shut down
        from app.core.chat.conversation_session import ConversationSession

        cid = conversation_id if conversation_id is not None else -1
        try:
            info = self._require_model()
            if conversation_id is None:
                session = ConversationSession.start(
                    self.engine,
                    self.store,
                    preset,
                    model=info.folder,
                    pressure=self.pressure,
                    device_limit=self.device_limit,
                )
                cid = session.conversation_id
                self._sessions[cid] = session
                self.conversation_started.emit(cid)
            else:
                session = self._session(conversation_id)
                if self.store.get_conversation(cid).model != info.folder:
                    self.store.update_conversation(cid, model=info.folder)
            self._run_turn(
                cid,
                session,
                lambda on_text, on_progress: session.send(
                    text,
                    on_text=on_text,
                    on_progress=on_progress,
                    on_trim=lambda outcome: self.trim_happened.emit(cid, outcome),
                ),
            )
        except Exception as exc:
            self._fail_turn(cid, exc)

    @Slot(int)
    def _on_regenerate_requested(self, conversation_id: int) -> None:
        if self._parked:
            return  # the window has shut down
        try:
            self._require_model()
            session = self._session(conversation_id)
            self._run_turn(conversation_id, session, session.regenerate)
        except Exception as exc:
            self._fail_turn(conversation_id, exc)

    @Slot(int, int, str)
    def _on_edit_requested(
        self, conversation_id: int, message_id: int, text: str
    ) -> None:
        if self._parked:
            return  # the window has shut down
        try:
            self._require_model()
            session = self._session(conversation_id)
            self._run_turn(
                conversation_id,
                session,
                lambda on_text, on_progress: session.edit_and_resend(
                    message_id, text, on_text=on_text, on_progress=on_progress
                ),
            )
        except Exception as exc:
            self._fail_turn(conversation_id, exc)

    @Slot(object, str, str, object)
    def _on_document_requested(
        self, conversation_id, path: str, question: str, preset
    ) -> None:
        if self._parked:
            return  # the window has shut down
        from app.core.longdoc import (
            AnswerChunk,
            LongDocumentRunner,
            RunFinished,
            RunStarted,
            read_document,
        )

        cid = conversation_id if conversation_id is not None else -1
        finished = None
        try:
            self._require_model()
            document = read_document(path)
            runner = LongDocumentRunner(
                self.engine, self.store, preset, budget_settings=self._settings.budget()
            )
            with self._active_lock:
                self._active_runner = runner
            if self._cancel.is_set():
                runner.cancel()
            events = runner.run(
                document, question or None, conversation_id=conversation_id
            )
            for event in events:
                if self._cancel.is_set():
                    runner.cancel()
                if isinstance(event, RunStarted):
                    if cid != event.conversation_id:
                        # A new chat, or an unfinished reading of this file resumed.
                        cid = event.conversation_id
                        self.conversation_started.emit(cid)
                    self.document_started.emit(cid, event)
                elif isinstance(event, AnswerChunk):
                    self.chunk_received.emit(cid, event.text)
                elif isinstance(event, RunFinished):
                    finished = event
                else:
                    self.document_progressed.emit(cid, event)
        except Exception as exc:
            self._fail_turn(cid, exc)
            return
        finally:
            with self._active_lock:
                self._active_runner = None
            self._cancel.clear()
            # The runner used (and freed) the conversation's cache key: start afresh.
            self._sessions.pop(cid, None)
        self.document_finished.emit(cid, finished)
        self._on_measure_requested(cid, None)

    def _run_turn(self, cid: int, session, turn) -> None:
        """Run one blocking turn with streaming callbacks; emit its outcome."""
        trims_before = session.trims
        with self._active_lock:
            self._active_session = session
        self.turn_started.emit(cid)

        def on_text(piece: str) -> None:
            if self._cancel.is_set():
                session.cancel()
            self.chunk_received.emit(cid, piece)

        def on_progress(progress) -> None:
            if self._cancel.is_set():
                session.cancel()
            self.prefill_progressed.emit(cid, progress.processed, progress.total)

        try:
            report = turn(on_text, on_progress)
        finally:
            with self._active_lock:
                self._active_session = None
            self._cancel.clear()
        if session.trims > trims_before and not report.trimmed and session.last_trim:
            # edit_and_resend trims without a callback; tell the window afterwards.
            self.trim_happened.emit(cid, session.last_trim)
        self.generation_finished.emit(cid, report)
        self._emit_context(cid, session, report)

    def _fail_turn(self, cid: int, exc: Exception) -> None:
        self._cancel.clear()
        self.generation_failed.emit(cid, self._error(exc, "generating a reply"))

    # -- presets and context -----------------------------------------------------------

    @Slot(int, object)
    def _on_preset_requested(self, conversation_id: int, preset) -> None:
        if self._parked:
            return  # the window has shut down
        try:
            if self.engine.model_info is None:
                # No session without a model: save it on the conversation directly.
                self.store.update_conversation(
                    conversation_id,
                    preset=preset.name,
                    settings=preset.to_dict(),
                    system_prompt=preset.system_prompt,
                )
            else:
                session = self._session(conversation_id)
                session.apply_preset(preset)
        except Exception as exc:
            self.preset_failed.emit(
                conversation_id, self._error(exc, "changing the preset")
            )
            return
        self.preset_applied.emit(conversation_id, preset)
        self._on_measure_requested(conversation_id, None)

    @Slot(object, object)
    def _on_measure_requested(self, conversation_id, preset) -> None:
        if self._parked:
            return  # the window has shut down
        if self.engine.model_info is None:
            return
        try:
            if conversation_id is None:
                self.context_measured.emit(self._new_chat_state(preset))
            else:
                session = self._session(conversation_id)
                self._emit_context(conversation_id, session, None)
        except Exception as exc:
            # The meter is informative: a failure here must not interrupt the user.
            log.warning("measuring the context failed: %s", exc, exc_info=True)

    def _emit_context(self, cid: int, session, report) -> None:
        self.context_measured.emit(self._state(cid, session, report))

    def _state(self, cid: int, session, report) -> ContextState:
        preset = session.preset
        limit = session.effective_limit()
        if report is not None:
            tokens, kv_bytes, exact = report.context_tokens, report.kv_bytes, True
        else:
            cached = self.engine.cache_state(session.cache_key)
            if cached.tokens:
                tokens, kv_bytes, exact = cached.tokens, cached.kv_bytes, True
            else:
                messages = session.model_messages(session.context())
                tokens = len(self.engine.render(messages, False)) if messages else 0
                kv_bytes, exact = self._estimate_kv(tokens, preset.kv_bits), False
        trims = len(self.store.summaries(cid, include_superseded=True))
        return ContextState(
            conversation_id=cid,
            tokens=tokens,
            effective_limit=limit,
            preset_limit=preset.max_context,
            kv_bytes=kv_bytes,
            kv_bits=preset.kv_bits,
            trims=trims,
            next_trim_at=self._next_trim_at(limit, preset),
            exact=exact,
        )

    def _new_chat_state(self, preset: Preset) -> ContextState:
        limit = preset.max_context
        device = self.device_limit(preset.kv_bits)
        if device is not None:
            limit = min(limit, device)
        messages = (
            [{"role": "system", "content": preset.system_prompt}]
            if preset.system_prompt
            else []
        )
        tokens = len(self.engine.render(messages, False)) if messages else 0
        return ContextState(
            conversation_id=None,
            tokens=tokens,
            effective_limit=limit,
            preset_limit=preset.max_context,
            kv_bytes=self._estimate_kv(tokens, preset.kv_bits),
            kv_bits=preset.kv_bits,
            trims=0,
            next_trim_at=self._next_trim_at(limit, preset),
            exact=False,
        )

    def _estimate_kv(self, tokens: int, bits: int) -> int:
        from app.core.budget.kv_budget import bytes_per_token, round_up_to_step

        budget = getattr(self.engine, "device_budget", None)
        if not tokens or budget is None:
            return 0
        try:
            per_token = bytes_per_token(
                budget.geometry, bits, 64, budget.act_dtype_bytes
            )
        except ValueError:
            return 0  # a precision this model cannot use
        return round_up_to_step(tokens) * per_token

    def _next_trim_at(self, limit: int, preset: Preset) -> int:
        from app.core.trim.policy import DEFAULT_WARNING_TRIM_RATIO, trim_threshold

        threshold = trim_threshold(limit, self.pressure(), DEFAULT_WARNING_TRIM_RATIO)
        return max(0, threshold - preset.max_tokens)

    @Slot(int)
    def _on_forget_requested(self, conversation_id: int) -> None:
        if self._parked:
            return  # the window has shut down
        session = self._sessions.pop(conversation_id, None)
        if session is not None and self.engine.model_info is not None:
            try:
                self.engine.drop_cache(session.cache_key)
            except Exception as exc:  # a cache that is already gone is fine
                log.info("dropping the cache of %s: %s", conversation_id, exc)

    @Slot()
    def _on_park_requested(self) -> None:
        # Objects may only be pushed from their own thread; back on the main thread the
        # worker can be deleted after its thread has stopped, without Qt warnings. The
        # thread is stopped from here, after the move, so no queued request is lost.
        self._parked = True
        thread = QThread.currentThread()
        self.moveToThread(QCoreApplication.instance().thread())
        thread.quit()

    # -- errors ------------------------------------------------------------------------

    def _error(self, exc: BaseException, doing: str) -> WorkerError:
        if isinstance(exc, KnownError):
            return WorkerError(str(exc), True)
        log.error("bug while %s", doing, exc_info=exc)
        details = "".join(traceback.format_exception(exc))
        return WorkerError(
            f"Something went wrong while {doing} ({type(exc).__name__}: {exc}). "
            "This is a bug in Swapless; the details were written to the log.",
            False,
            details,
        )
