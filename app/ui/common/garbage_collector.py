"""Run Python's cyclic garbage collector on the UI thread only.

Python collects reference cycles on whichever thread happens to allocate when a
threshold is passed: in Swapless often the engine's thread, busy loading a model. If a
cycle holds a Qt object that lives on the UI thread (a closed window, a dialog), Qt
then destroys it from the wrong thread and the process crashes (seen in the window
tests). The remedy PyQt's documentation and qutebrowser use: switch automatic
collection off and collect from a UI-thread timer with the same thresholds.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

INTERVAL_MS = 1000


class MainThreadGarbageCollector(QObject):
    """Disables automatic collection and collects on a UI-thread timer instead.

    Args:
        parent: Owner (the application); collection stops with it.
        interval_ms: How often the thresholds are checked.
    """

    def __init__(self, parent: QObject | None = None, interval_ms: int = INTERVAL_MS):
        super().__init__(parent)
        self.threshold = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.disable()
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self._on_timer_timeout)
        self.timer.start()

    def collect_now(self) -> int:
        """Collect every generation now; return the number of objects found."""
        return gc.collect()

    def stop(self) -> None:
        """Stop the timer; switch automatic collection back on if it was on before."""
        self.timer.stop()
        if self._was_enabled:
            gc.enable()

    def _on_timer_timeout(self) -> None:
        # The same generational thresholds gc uses, checked from this thread.
        young, middle, old = gc.get_count()
        if young > self.threshold[0]:
            gc.collect(0)
            if middle > self.threshold[1]:
                gc.collect(1)
                if old > self.threshold[2]:
                    gc.collect(2)
