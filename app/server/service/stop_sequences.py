"""Ending a streamed reply at a stop sequence without ever sending any part of it.

The engine streams text in pieces of a token or less, and a stop sequence may span
pieces. The scanner passes text on as soon as it cannot be the start of a stop
sequence and holds back only the shortest tail that still could be, so a streamed
reply never shows a stop sequence or half of one, and it adds no delay otherwise.
"""

from __future__ import annotations


class StopScanner:
    """Finds the first stop sequence in streamed text.

    Args:
        stops: The sequences; none means text passes straight through.
    """

    def __init__(self, stops: tuple[str, ...] = ()):
        self.stops = tuple(s for s in stops if s)
        self._held = ""
        self.stopped = False
        self.matched = ""  # the stop sequence found (Anthropic reports which)

    def feed(self, text: str) -> str:
        """Add streamed text; return what may be sent now.

        After a stop sequence is found, `stopped` is True, the text before it is
        returned and everything after it is dropped.
        """
        if self.stopped:
            return ""
        if not self.stops:
            return text
        buffer = self._held + text
        first = min(
            (i for i in (buffer.find(s) for s in self.stops) if i >= 0), default=-1
        )
        if first >= 0:
            self.stopped = True
            self._held = ""
            self.matched = next(s for s in self.stops if buffer.find(s) == first)
            return buffer[:first]
        keep = self._partial_tail(buffer)
        self._held = buffer[len(buffer) - keep :] if keep else ""
        return buffer[: len(buffer) - keep]

    def flush(self) -> str:
        """Return the held-back tail at the end of the reply (it was no stop)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_tail(self, buffer: str) -> int:
        """Length of the longest tail of ``buffer`` that begins some stop sequence."""
        longest = 0
        for stop in self.stops:
            for size in range(min(len(stop) - 1, len(buffer)), longest, -1):
                if buffer.endswith(stop[:size]):
                    longest = size
                    break
        return longest
