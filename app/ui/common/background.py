"""Run short blocking jobs (folder scans, doctor verdicts, downloads) off the UI thread.

`TaskSet.start` runs a plain function on Qt's global thread pool and calls back on the
UI thread. The function receives a ``report`` callable for progress.

Lifetimes are the point of this module. Results travel through signals of the
`TaskSet` itself, which has a Qt parent (its window or dialog) and so is deleted on the
UI thread with it; no per-task QObject exists that Python's garbage collector could
free later on some other thread (the engine's, say) while Qt still has events queued
for it, which crashed the process. A result that arrives after its `TaskSet` is gone
is dropped instead of calling into deleted widgets.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot
from shiboken6 import isValid

log = logging.getLogger(__name__)


class _Runnable(QRunnable):
    """Runs one function on a pool thread and reports through its `TaskSet`."""

    def __init__(self, owner: TaskSet, task_id: int, function):
        super().__init__()
        self.setAutoDelete(True)  # the pool deletes it once run() has returned
        self._owner = owner
        self._task_id = task_id
        self._function = function

    def _emit(self, name: str, value: Any) -> None:
        owner = self._owner
        if not isValid(owner):
            return  # the window closed meanwhile: nobody to tell
        with contextlib.suppress(RuntimeError):  # deleted between check and emit
            getattr(owner, name).emit(self._task_id, value)

    def run(self) -> None:
        try:
            result = self._function(lambda value: self._emit("_task_progressed", value))
        except Exception as exc:  # delivered to the UI thread, which decides
            self._emit("_task_failed", exc)
            return
        self._emit("_task_finished", result)


class TaskSet(QObject):
    """Background jobs of one window or dialog, and their callbacks.

    Args:
        parent: The window or dialog whose lifetime the callbacks share.
        pool: A thread pool other than Qt's global one, for a job that waits for
            minutes (a quality check) and must not hold one of the few global threads
            that folder scans and verdicts need.
    """

    _task_progressed = Signal(int, object)
    _task_finished = Signal(int, object)
    _task_failed = Signal(int, object)

    def __init__(self, parent: QObject | None = None, pool: QThreadPool | None = None):
        super().__init__(parent)
        self._pool = pool
        self._ids = itertools.count(1)
        self._callbacks: dict[int, tuple] = {}
        # Emitted from pool threads; this object lives on the UI thread, so these
        # connections are queued and the slots run there.
        self._task_progressed.connect(self._on_self_task_progressed)
        self._task_finished.connect(self._on_self_task_finished)
        self._task_failed.connect(self._on_self_task_failed)

    def start(
        self,
        function: Callable[[Callable[[Any], None]], Any],
        on_finished: Callable[[Any], None] | None = None,
        on_failed: Callable[[Exception], None] | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> int:
        """Run ``function(report)`` on the pool; the callbacks run on the UI thread.

        Returns:
            The task's id.
        """
        task_id = next(self._ids)
        self._callbacks[task_id] = (on_finished, on_failed, on_progress)
        pool = self._pool or QThreadPool.globalInstance()
        pool.start(_Runnable(self, task_id, function))
        return task_id

    @property
    def running(self) -> int:
        """Tasks whose result was not delivered yet."""
        return len(self._callbacks)

    def forget_all(self) -> None:
        """Drop the callbacks of every running task (their results are ignored)."""
        self._callbacks.clear()

    @staticmethod
    def wait(timeout_ms: int) -> bool:
        """Wait for the pool's running jobs; True if they all finished."""
        return QThreadPool.globalInstance().waitForDone(timeout_ms)

    @Slot(int, object)
    def _on_self_task_progressed(self, task_id: int, value: Any) -> None:
        callbacks = self._callbacks.get(task_id)
        if callbacks is not None and callbacks[2] is not None:
            callbacks[2](value)

    @Slot(int, object)
    def _on_self_task_finished(self, task_id: int, result: Any) -> None:
        callbacks = self._callbacks.pop(task_id, None)
        if callbacks is not None and callbacks[0] is not None:
            callbacks[0](result)

    @Slot(int, object)
    def _on_self_task_failed(self, task_id: int, exc: Exception) -> None:
        callbacks = self._callbacks.pop(task_id, None)
        if callbacks is None:
            return
        if callbacks[1] is not None:
            callbacks[1](exc)
        else:
            log.error("background task failed", exc_info=exc)
