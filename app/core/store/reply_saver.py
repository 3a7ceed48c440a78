"""Saving a streamed reply often enough to survive a crash, rarely enough to be cheap.

Tokens arrive tens of times a second; writing each one would mean an fsync per
token. `ReplySaver` collects them and writes the partial text at most once a second
or every 64 tokens, whichever comes first, so a crash loses about a second of text.
It belongs with the store rather than the engine or the UI because both the CLI and
the GUI stream replies the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.core.errors import KnownError
from app.core.store.records import ReplyStats

if TYPE_CHECKING:
    from app.core.store.store import Store


class ReplySaver:
    """Accumulates a reply's text and saves it to the store, throttled.

    Typical use::

        saver = ReplySaver(store, store.begin_reply(conversation_id))
        for chunk in engine.stream(...):
            saver.add(chunk.text)
        saver.finish(stats)

    Attributes:
        message_id: The reply being saved.
        saves: How many partial-text writes were made so far.
    """

    def __init__(
        self,
        store: Store,
        message_id: int,
        every_seconds: float = 1.0,
        every_tokens: int = 64,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Start saving the reply ``message_id`` (from `Store.begin_reply`).

        Args:
            store: The open store.
            message_id: A reply in state ``generating``.
            every_seconds: Save when this much time passed since the last save.
            every_tokens: Save when this many tokens arrived since the last save.
            clock: Monotonic seconds; tests pass a fake one.

        Raises:
            ValueError: A threshold is not positive.
        """
        if every_seconds <= 0:
            raise ValueError(f"every_seconds must be positive, not {every_seconds}")
        if every_tokens <= 0:
            raise ValueError(f"every_tokens must be positive, not {every_tokens}")
        self.message_id = message_id
        self.saves = 0
        self._store = store
        self._every_seconds = every_seconds
        self._every_tokens = every_tokens
        self._clock = clock
        self._parts: list[str] = []
        self._reasoning: list[str] = []
        self._unsaved_tokens = 0
        self._saved_at = clock()
        self._dirty = False

    @property
    def text(self) -> str:
        """All the text received so far."""
        return "".join(self._parts)

    @property
    def reasoning(self) -> str:
        """All the reasoning text received so far."""
        return "".join(self._reasoning)

    def add(self, delta_text: str, tokens: int = 1, *, reasoning: bool = False) -> None:
        """Append streamed text; saves if a threshold was reached.

        Args:
            delta_text: The new text.
            tokens: How many tokens it holds (engines usually stream one at a time).
            reasoning: The text is the model's reasoning, not its answer.
        """
        (self._reasoning if reasoning else self._parts).append(delta_text)
        self._unsaved_tokens += tokens
        self._dirty = True
        if (
            self._unsaved_tokens >= self._every_tokens
            or self._clock() - self._saved_at >= self._every_seconds
        ):
            self.flush()

    def _extra(self) -> dict[str, Any]:
        """The reasoning argument, given only when there is reasoning."""
        return {"reasoning": self.reasoning} if self._reasoning else {}

    def flush(self) -> None:
        """Save the text now if anything arrived since the last save."""
        if not self._dirty:
            return
        self._store.update_reply_text(self.message_id, self.text, **self._extra())
        self.saves += 1
        self._unsaved_tokens = 0
        self._saved_at = self._clock()
        self._dirty = False

    def finish(self, stats: ReplyStats | None = None, *, stopped: bool = False) -> None:
        """Save the complete reply with its stats (``interrupted`` if ``stopped``)."""
        self._store.finish_reply(
            self.message_id, self.text, stats, stopped=stopped, **self._extra()
        )
        self._dirty = False

    def fail(self, error: BaseException | str, stats: ReplyStats | None = None) -> None:
        """Save the reply as failed, keeping the text received so far.

        Args:
            error: The exception that stopped generation, or a message.
            stats: Measurements up to the failure, if any.
        """
        message = str(error)
        if isinstance(error, BaseException) and not isinstance(error, KnownError):
            # A bug's type often says more than its (possibly empty) message; a
            # KnownError's message is already written for the user.
            name = type(error).__name__
            message = f"{name}: {message}" if message else name
        self._store.fail_reply(
            self.message_id, self.text, message, stats, **self._extra()
        )
        self._dirty = False
