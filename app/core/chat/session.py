"""One conversation driven turn by turn: the shared core of the CLI and the app.

`ChatSession` builds what is sent to the model (system prompt + history + the new user
message), runs the turn on the engine and turns the final event into a `TurnReport`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

from app.core.chat.turn_report import TurnReport
from app.core.engine.events import GenerationEvent, PrefillProgress
from app.core.generation_settings import KVSettings, SamplingSettings


class ChatSession:
    """A conversation with one model through the engine.

    Args:
        engine: A loaded `app.core.engine.engine.Engine`.
        system_prompt: The system prompt, or empty for none.
        kv: KV precision.
        sampling: Sampling settings.
        cache_key: The engine cache key (defaults to a fresh unique key).
    """

    def __init__(
        self,
        engine,
        *,
        system_prompt: str = "",
        kv: KVSettings | None = None,
        sampling: SamplingSettings | None = None,
        cache_key: str | None = None,
    ):
        self.engine = engine
        self.system_prompt = system_prompt
        self.kv = kv or KVSettings()
        self.sampling = sampling or SamplingSettings()
        self.cache_key = cache_key or f"session-{uuid.uuid4().hex}"
        self.history: list[dict] = []
        self._handle = None
        self._lock = threading.Lock()

    def model_messages(self, user_text: str | None = None) -> list[dict]:
        """Return the messages sent to the model for the next turn."""
        messages = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.extend(self.history)
        if user_text is not None:
            messages.append({"role": "user", "content": user_text})
        return messages

    def send(
        self,
        user_text: str,
        on_text: Callable[[str], None] | None = None,
        on_progress: Callable[[PrefillProgress], None] | None = None,
    ) -> TurnReport:
        """Send a user message and wait for the whole reply.

        Args:
            user_text: The user's message.
            on_text: Called with each new piece of reply text as it streams.
            on_progress: Called with prefill progress of long prompts.

        Returns:
            The turn's report. A cancelled reply is kept in the history as far as it got.
        """
        handle = self.engine.chat(
            self.cache_key, self.model_messages(user_text), self.kv, self.sampling
        )
        with self._lock:
            self._handle = handle
        parts: list[str] = []
        try:
            for event in handle:
                if isinstance(event, GenerationEvent):
                    if event.text:
                        parts.append(event.text)
                        if on_text:
                            on_text(event.text)
                elif isinstance(event, PrefillProgress) and on_progress:
                    on_progress(event)
        finally:
            with self._lock:
                self._handle = None
        final = handle.final
        reply = "".join(parts)
        self.history.append({"role": "user", "content": user_text})
        self.history.append({"role": "assistant", "content": reply})
        return report_from_event(reply, final)

    def cancel(self) -> None:
        """Stop the reply in progress, if any (safe from any thread)."""
        with self._lock:
            if self._handle is not None:
                self._handle.cancel()


def report_from_event(reply: str, final: GenerationEvent, **ids) -> TurnReport:
    """Build a `TurnReport` from a turn's final event."""
    return TurnReport(
        reply=reply,
        prompt_tokens=final.prompt_tokens,
        reused_tokens=final.reused_tokens,
        reuse_source=final.reuse_source,
        new_tokens=final.new_tokens,
        generated_tokens=final.generated_tokens,
        context_tokens=final.context_tokens,
        kv_bytes=final.kv_bytes,
        kv_bits=final.kv_bits,
        ttft_s=final.ttft_s,
        prefill_s=final.prefill_s,
        tokens_per_s=final.tokens_per_s,
        peak_memory_bytes=final.peak_memory_bytes,
        finish_reason=final.finish_reason or "stop",
        **ids,
    )
