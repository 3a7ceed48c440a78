"""What a caller holds while the engine works for it: a turn's handle and cache reports.

A `TurnHandle` carries a turn's events from the engine thread to the consumer's thread
in order; an exception raised on the engine thread travels with them and is re-raised
where the consumer iterates. The reports are frozen values, safe to pass anywhere.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.core.cancel import CancelToken
from app.core.engine.events import GenerationEvent

DONE = object()
"""Put last into a handle's queue: the turn has ended (after its final event)."""


@dataclass(frozen=True)
class CacheState:
    """A snapshot of one conversation's cache.

    Attributes:
        tokens: Tokens the cache holds.
        kv_bytes: Bytes its live arrays occupy (every layer kind).
        kv_bits: Precision of the growing (full-attention) entries.
        next_position: Rotary position of the next token (ahead of ``tokens`` after
            splices).
        kv_layers: Which entries are at which precision (`events.LayerGroup`s: full
            attention quantized, sliding windows and recurrent state not).
        checkpoint_bytes: Bytes of the state checkpoints kept for turn reuse.
    """

    tokens: int
    kv_bytes: int
    kv_bits: int
    next_position: int = 0
    kv_layers: tuple = ()
    checkpoint_bytes: int = 0


@dataclass(frozen=True)
class PrefillReport:
    """What filling or splicing a cache cost.

    Attributes:
        seconds: Wall time on the engine thread.
        reused_tokens: Entries kept without recomputation.
        computed_tokens: Tokens run through the model.
        context_tokens: Tokens the cache holds afterwards.
        kv_bytes: Bytes the cache holds afterwards.
    """

    seconds: float
    reused_tokens: int
    computed_tokens: int
    context_tokens: int
    kv_bytes: int

    @classmethod
    def after(cls, cache, started: float, reused: int, computed: int) -> PrefillReport:
        """The report of work on ``cache`` that began at ``started`` (perf_counter)."""
        return cls(
            seconds=time.perf_counter() - started,
            reused_tokens=reused,
            computed_tokens=computed,
            context_tokens=cache.offset,
            kv_bytes=cache.nbytes,
        )


class Failure:
    """An exception raised on the engine thread, on its way to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error


class TurnHandle:
    """The consumer's side of one streamed turn.

    Iterate it to receive `PrefillProgress` and `GenerationEvent` objects in order; the
    iteration ends after the event whose ``finish_reason`` is set. `cancel` may be
    called from any thread.

    Args:
        cancel: The token the engine polls after every token and between prefill
            chunks; a new one when None.
    """

    def __init__(self, cancel: CancelToken | None = None):
        self._events: queue.Queue = queue.Queue()
        self._cancel = cancel if cancel is not None else CancelToken()
        self.final: GenerationEvent | None = None

    def cancel(self) -> None:
        """Ask the engine to stop after the current token."""
        self._cancel.cancel()

    @property
    def cancelled(self) -> bool:
        """True once `cancel` was called."""
        return self._cancel.cancelled

    def _put(self, item: Any) -> None:
        self._events.put(item)

    def __iter__(self) -> Iterator[Any]:
        while True:
            item = self._events.get()
            if item is DONE:
                return
            if isinstance(item, Failure):
                raise item.error
            if isinstance(item, GenerationEvent) and item.finished:
                self.final = item
            yield item

    def wait(self) -> GenerationEvent:
        """Consume every event and return the final one."""
        for _ in self:
            pass
        if self.final is None:
            raise RuntimeError("turn ended without a final event")
        return self.final

    def text(self) -> str:
        """Consume every event and return the whole reply text (the answer: a
        reasoning model's thoughts are left out)."""
        parts = [
            e.text
            for e in self
            if isinstance(e, GenerationEvent) and e.channel == "answer"
        ]
        return "".join(parts)
