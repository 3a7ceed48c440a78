"""How one request's events travel from its worker thread to the HTTP event loop.

The engine API blocks, so each request runs on a worker thread; its events reach the
asyncio loop through a `Bridge` queue. `next_item` waits for the next one, or returns
`TICK` after a quiet interval so a stream can send its keep-alive (a long prefill
sends nothing for minutes, and agents' HTTP clients give up on a silent socket).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from app.core.cancel import CancelToken
from app.server.events import TextDelta


class Failed:
    """An exception raised while answering, on its way to the loop."""

    def __init__(self, error: BaseException):
        self.error = error


GONE = object()
"""Put into a bridge when the client disconnected before its reply started."""
TICK = object()
"""Returned by `Bridge.next_item` when nothing came within the keep-alive interval."""


class Bridge:
    """Carries one request's events from its worker thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self._loop = loop
        self._queue: asyncio.Queue = asyncio.Queue()
        self._held: Any = None
        self.cancel = CancelToken()

    def put(self, item: Any) -> None:
        """Hand over an item (worker thread)."""
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is stopping
            self.cancel.cancel()

    def put_here(self, item: Any) -> None:
        """Hand over an item from the loop itself."""
        self._queue.put_nowait(item)

    async def get(self) -> Any:
        """The next item."""
        if self._held is not None:
            item, self._held = self._held, None
            return item
        return await self._queue.get()

    async def next_item(self, interval: float) -> Any:
        """The next item, or `TICK` when none came within ``interval`` seconds."""
        if self._held is not None or not self._queue.empty():
            return await self.get()
        try:
            return await asyncio.wait_for(self._queue.get(), interval)
        except TimeoutError:
            return TICK

    def more_text(self, channel: str = "answer") -> str:
        """Text of ``channel``'s deltas already waiting, merged (the loop fell behind);
        a delta of the other channel stops the merge."""
        texts = []
        while self._held is None and not self._queue.empty():
            item = self._queue.get_nowait()
            if isinstance(item, TextDelta) and item.channel == channel:
                texts.append(item.text)
            else:
                self._held = item
        return "".join(texts)


class Pending:
    """Requests accepted and not yet finished, bounded."""

    def __init__(self, limit: int):
        self.limit = limit
        self.count = 0
        self._lock = threading.Lock()

    def enter(self) -> bool:
        with self._lock:
            if self.count >= self.limit:
                return False
            self.count += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self.count -= 1
