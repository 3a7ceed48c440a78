"""Coalesce bursts of calls into one call per interval (qutebrowser's ``misc/throttle``).

A reply arrives a token at a time, hundreds per second on a small model; re-rendering
Markdown and relaying out the chat for each would starve the event loop. Callers record
the new state cheaply and `trigger` the throttle; the function runs at most once per
interval, after the burst's first trigger, with whatever state is newest by then.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer

DEFAULT_INTERVAL_MS = 40


class Throttle(QObject):
    """Runs ``function`` at most once per ``interval_ms``.

    Args:
        function: Called without arguments on the UI thread.
        interval_ms: Longest delay between a trigger and the call.
        parent: Owner of the timer.
    """

    def __init__(
        self,
        function: Callable[[], None],
        interval_ms: int = DEFAULT_INTERVAL_MS,
        parent: QObject | None = None,
    ):
        super().__init__(parent)
        self._function = function
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self._on_timer_timeout)

    def trigger(self) -> None:
        """Ask for a call; calls within the interval are folded into it."""
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        """Call now if a call is pending (e.g. before the final state is shown)."""
        if self._timer.isActive():
            self._timer.stop()
            self._function()

    def cancel(self) -> None:
        """Drop a pending call."""
        self._timer.stop()

    def _on_timer_timeout(self) -> None:
        self._function()
