"""Samples the machine's memory every 500 ms on its own thread, off the UI thread.

A `MemorySampler` is moved to a QThread; its timer lives there, so a slow sample (a
loaded machine is exactly when ``/proc`` reads stall) never delays a repaint. Each
`MemorySnapshot` goes to the window through `snapshot_taken`, and the newest one is
kept for the generation worker's pressure callback, which reads it from the worker
thread (a single attribute read, so no lock is needed).

MLX's counters are read only after the engine has loaded a model: MLX is then already
imported on the engine's thread, and importing it here first could tie its default
streams to the sampler thread on Metal.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal, Slot

from app.core.memory.probe import MemoryProbe
from app.core.memory.snapshot import MemorySnapshot

log = logging.getLogger(__name__)

SAMPLE_INTERVAL_MS = 500


class MemorySampler(QObject):
    """Takes a `MemorySnapshot` every ``interval_ms`` on the thread it is moved to.

    Args:
        kv_bytes: Returns the bytes held by the engine's KV caches (thread-safe).
        mlx_stats: Returns MLX (active, cache, peak) bytes; used once `enable_mlx_stats`
            is called.
        interval_ms: Sampling period.
    """

    snapshot_taken = Signal(object)

    def __init__(
        self, kv_bytes=None, mlx_stats=None, interval_ms: int = SAMPLE_INTERVAL_MS
    ):
        super().__init__()
        self._kv_bytes = kv_bytes
        self._mlx_stats = mlx_stats
        self._interval_ms = interval_ms
        self._mlx_ready = threading.Event()
        self._probe: MemoryProbe | None = None
        self._probe_has_mlx = False
        self._timer: QTimer | None = None
        self.latest: MemorySnapshot | None = None

    def pressure_level(self) -> str:
        """The newest pressure level (``normal`` before the first sample); any thread."""
        latest = self.latest
        return latest.pressure.value if latest is not None else "normal"

    def enable_mlx_stats(self) -> None:
        """Include MLX's counters from the next sample on (any thread)."""
        self._mlx_ready.set()

    @Slot()
    def start(self) -> None:
        """Start sampling (connect it to the thread's ``started``)."""
        self._timer = QTimer(self)
        self._timer.setInterval(self._interval_ms)
        self._timer.timeout.connect(self._on_timer_timeout)
        self._timer.start()
        self._on_timer_timeout()

    @Slot()
    def stop(self) -> None:
        """Stop sampling and hand the object back to the main thread."""
        if self._timer is not None:
            self._timer.stop()
        app = QCoreApplication.instance()
        if app is not None:
            self.moveToThread(app.thread())

    def _on_timer_timeout(self) -> None:
        try:
            snapshot = self._sample()
        except Exception as exc:  # the gauge must never take the app down
            log.warning("memory sample failed: %s", exc, exc_info=True)
            return
        self.latest = snapshot
        self.snapshot_taken.emit(snapshot)

    def _sample(self) -> MemorySnapshot:
        with_mlx = self._mlx_ready.is_set() and self._mlx_stats is not None
        if self._probe is None or with_mlx != self._probe_has_mlx:
            self._probe = MemoryProbe(
                mlx_stats=self._mlx_stats if with_mlx else None,
                kv_bytes=self._kv_bytes,
            )
            self._probe_has_mlx = with_mlx
        return self._probe.sample()
