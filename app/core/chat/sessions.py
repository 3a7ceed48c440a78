"""The open conversations of one engine: their sessions, presets and context numbers.

The app keeps one `ConversationSession` per conversation it has used since the model
loaded (each knows its cache key, preset and trim count); this registry creates them,
applies presets to them (also before any model is loaded), forgets them, and answers
the context meter's question for any conversation or for a new chat. It is Qt-free and
thread-safe: the generation worker runs turns through it while the window may ask for
another conversation's numbers from a background thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from app.core.budget.context_state import ContextState, context_state, effective_limit
from app.core.chat.conversation_session import ConversationSession, save_preset
from app.core.errors import KnownError, SettingsError
from app.core.presets.presets import Preset, get_preset
from app.core.reasoning.thinking import reply_room

log = logging.getLogger(__name__)

NO_MODEL_MESSAGE = (
    "No model is loaded. Pick one at the top of the window or open Models…"
)


class SessionRegistry:
    """Sessions of the conversations in use with one engine.

    Args:
        engine: The engine (loaded or not).
        store: The open store.
        pressure: Returns the system memory pressure level now.
    """

    def __init__(self, engine, store, pressure: Callable[[], str] = lambda: "normal"):
        self.engine = engine
        self.store = store
        self.pressure = pressure
        self._sessions: dict[int, ConversationSession] = {}
        self._lock = threading.RLock()

    # -- sessions --------------------------------------------------------------------

    def device_limit(self, bits: int, group: int = 64, aging=None) -> int | None:
        """The device's max safe context at a KV precision for the loaded model."""
        limit = getattr(self.engine, "max_safe_context", None)
        if limit is None:
            return None
        return limit(bits, group, aging) if aging is not None else limit(bits, group)

    def require_model(self):
        """The loaded model's `ModelInfo`.

        Raises:
            KnownError: No model is loaded.
        """
        info = self.engine.model_info
        if info is None:
            raise KnownError(NO_MODEL_MESSAGE)
        return info

    def get(self, conversation_id: int) -> ConversationSession:
        """The conversation's session, opened on first use.

        Settings saved by an older or hand-edited file make the conversation continue
        with the default preset (and a log line) rather than refuse to open.
        """
        with self._lock:
            session = self._sessions.get(conversation_id)
            if session is not None:
                return session
            try:
                session = self._open(conversation_id)
            except SettingsError as exc:
                log.warning(
                    "conversation %s: %s; using the default preset",
                    conversation_id,
                    exc,
                )
                save_preset(self.store, conversation_id, get_preset("chat"))
                session = self._open(conversation_id)
            self._sessions[conversation_id] = session
            return session

    def for_turn(self, conversation_id: int) -> ConversationSession:
        """The session of a conversation about to run a turn on the loaded model.

        A conversation started with another model is moved to the loaded one.
        """
        info = self.require_model()
        session = self.get(conversation_id)
        if self.store.get_conversation(conversation_id).model != info.folder:
            self.store.update_conversation(conversation_id, model=info.folder)
        return session

    def start(self, preset: Preset) -> ConversationSession:
        """Create a stored conversation on the loaded model and return its session."""
        info = self.require_model()
        session = ConversationSession.start(
            self.engine,
            self.store,
            preset,
            model=info.folder,
            pressure=self._pressure_now,
            device_limit=self.device_limit,
        )
        with self._lock:
            self._sessions[session.conversation_id] = session
        return session

    def _open(self, conversation_id: int) -> ConversationSession:
        return ConversationSession(
            self.engine,
            self.store,
            conversation_id,
            pressure=self._pressure_now,
            device_limit=self.device_limit,
        )

    def _pressure_now(self) -> str:
        # Looked up at each call: the app sets `pressure` after the sessions exist.
        return self.pressure()

    def apply_preset(self, conversation_id: int, preset: Preset) -> None:
        """Use ``preset`` from the conversation's next turn on, and store it."""
        if self.engine.model_info is None:
            save_preset(self.store, conversation_id, preset)
        else:
            self.get(conversation_id).apply_preset(preset)

    def forget(self, conversation_id: int) -> ConversationSession | None:
        """Drop a conversation's session (e.g. after it was deleted); return it."""
        with self._lock:
            return self._sessions.pop(conversation_id, None)

    def clear(self) -> None:
        """Drop every session (a new model was loaded)."""
        with self._lock:
            self._sessions.clear()

    # -- context numbers -------------------------------------------------------------

    def context_state(self, conversation_id: int, report=None) -> ContextState:
        """The meter's numbers for a stored conversation.

        Args:
            conversation_id: The conversation.
            report: Its last `TurnReport`, whose cache figures are exact; without it
                the engine's published cache state is read (no waiting on the engine
                thread), or the prompt is counted when it has no cache.
        """
        session = self.get(conversation_id)
        if report is not None:
            tokens, kv_bytes = report.context_tokens, report.kv_bytes
            layers = report.kv_layers
        else:
            cached = self.engine.cache_state(session.cache_key)
            tokens, kv_bytes = cached.tokens, cached.kv_bytes
            layers = cached.kv_layers

        def prompt_tokens() -> int:
            messages = session.model_messages(session.context())
            return len(self.engine.render(messages, False)) if messages else 0

        return context_state(
            conversation_id=conversation_id,
            preset=session.preset,
            limit=session.effective_limit(),
            cached_tokens=tokens,
            cached_kv_bytes=kv_bytes,
            prompt_tokens=prompt_tokens,
            trims=len(self.store.summaries(conversation_id, include_superseded=True)),
            pressure=self.pressure(),
            budget=getattr(self.engine, "device_budget", None),
            cached_layers=tuple(layers or ()),
            reply_tokens=self.reply_room(session.preset),
        )

    def reply_room(self, preset: Preset) -> int:
        """The room a reply gets with ``preset`` on the loaded model: max_tokens plus
        the thinking budget when the model reasons (`reply_room`)."""
        try:
            fmt = self.engine.tokenizer.reasoning
        except (KnownError, AttributeError):  # no model loaded yet
            return preset.max_tokens
        return reply_room(preset.max_tokens, preset.thinking_settings(), fmt)

    def new_chat_state(self, preset: Preset) -> ContextState:
        """The meter's numbers for a chat not sent yet, with ``preset``."""

        def prompt_tokens() -> int:
            if not preset.system_prompt:
                return 0
            system = [{"role": "system", "content": preset.system_prompt}]
            return len(self.engine.render(system, False))

        return context_state(
            conversation_id=None,
            preset=preset,
            limit=effective_limit(
                preset.max_context,
                preset.kv_bits,
                preset.kv_group,
                self.device_limit,
                preset.kv_aging,
            ),
            cached_tokens=0,
            cached_kv_bytes=0,
            prompt_tokens=prompt_tokens,
            trims=0,
            pressure=self.pressure(),
            budget=getattr(self.engine, "device_budget", None),
            reply_tokens=self.reply_room(preset),
        )
