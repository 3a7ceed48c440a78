"""The one long-lived thread that runs every MLX call of the process.

MLX streams belong to the thread that created them (mlx >= 0.31.2), so the model is
loaded and every generation runs on this same thread; other threads submit functions
and get futures back. The engine builds on it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future


class EngineThread:
    """Runs submitted functions one at a time on a dedicated daemon thread."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._closed = False

    def _ensure_thread(self) -> None:
        with self._thread_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._serve, name="swapless-engine", daemon=True
                )
                self._thread.start()

    def _serve(self) -> None:
        while True:
            function, args, future = self._jobs.get()
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # travels to the caller through the future
                future.set_exception(exc)

    def submit(self, function: Callable, *args) -> Future:
        """Run ``function(*args)`` on the engine thread; return its future."""
        if self._closed:
            raise RuntimeError("the engine was shut down")
        self._ensure_thread()
        future: Future = Future()
        self._jobs.put((function, args, future))
        return future

    def shutdown(self, timeout: float = 5.0) -> None:
        """Wait (up to ``timeout`` s) for the jobs already queued, then refuse new ones.

        The thread itself is parked, never ended: an MLX thread that exits after
        importing model modules aborts the whole process ("terminate called without an
        active exception", measured with mlx 0.32.4), so it stays until the process
        exits (it is a daemon thread).
        """
        if self._thread is None or not self._thread.is_alive():
            self._closed = True
            return
        drained = self.submit(lambda: None)
        self._closed = True
        with contextlib.suppress(Exception):  # a failing last job was reported already
            drained.result(timeout)
