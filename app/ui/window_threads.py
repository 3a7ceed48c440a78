"""The window's threads: the generation worker, the document worker, the memory sampler.

Start: the worker (engine, sessions), the document worker (long documents, sharing the
worker's engine) and the sampler each move to their own QThread.
Stop, within about two seconds even mid-reply: cancel the reply (the core keeps it as
stopped), stop the sampler, let the worker finish what is queued and park itself back on
the UI thread, and wait. A thread that does not stop in time (a model still loading) is
kept referenced so Qt never destroys a running QThread; the process exits around it.
"""

from __future__ import annotations

import logging
import time

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QMetaObject,
    QObject,
    Qt,
    QThread,
)
from PySide6.QtWidgets import QMainWindow

from app.ui.chat.generation_worker import GenerationWorker
from app.ui.documents.document_worker import DocumentWorker
from app.ui.status.memory_sampler import MemorySampler

log = logging.getLogger(__name__)

SHUTDOWN_WAIT_MS = 1500
SAMPLER_WAIT_MS = 500
# Threads a shutdown could not stop: kept referenced, never destroyed while running.
STUCK_THREADS: list[QThread] = []


def dispose_window(window: QMainWindow) -> None:
    """Close a window and delete it now, on this (the UI) thread.

    ``deleteLater`` alone waits for a running event loop, which scripts and tests do not
    have; a window left to Python's garbage collector could then be destroyed on
    whatever thread happens to collect it (e.g. the engine's), which crashes Qt.
    """
    window.close()
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


class WindowThreads:
    """Builds, starts and stops the worker and sampler threads.

    Args:
        store: The open store.
        engine: An engine to use instead of a new real one (tests only).
        settings: App settings (the engine's budget).
    """

    def __init__(self, store, engine, settings):
        self.worker = GenerationWorker(store, engine, settings)
        self.worker_thread = QThread()
        self.worker_thread.setObjectName("swapless-generation")
        self.worker.moveToThread(self.worker_thread)
        engine = self.worker.engine
        self.documents = DocumentWorker(engine, store, settings)
        self.documents_thread = QThread()
        self.documents_thread.setObjectName("swapless-documents")
        self.documents.moveToThread(self.documents_thread)
        self.sampler = MemorySampler(
            kv_bytes=getattr(engine, "live_kv_bytes", None),
            mlx_stats=getattr(engine, "mlx_memory", None),
        )
        self.sampler_thread = QThread()
        self.sampler_thread.setObjectName("swapless-memory")
        self.sampler.moveToThread(self.sampler_thread)
        self.sampler_thread.started.connect(self.sampler.start)
        self.worker.pressure = self.sampler.pressure_level

    def start(self) -> None:
        """Start both threads."""
        self.worker_thread.start()
        self.documents_thread.start()
        self.sampler_thread.start()

    def stop(self) -> bool:
        """Stop the reply, the sampler and the worker; True when both threads stopped."""
        started = time.monotonic()
        self.worker.cancel()
        self.documents.cancel()  # a reading stops within a second, notes kept
        if self.sampler_thread.isRunning():
            QMetaObject.invokeMethod(
                self.sampler, "stop", Qt.ConnectionType.BlockingQueuedConnection
            )
            self.sampler_thread.quit()
            self.sampler_thread.wait(SAMPLER_WAIT_MS)
        self.worker.park()
        self.documents.park()
        stopped = True
        for thread in (self.documents_thread, self.worker_thread):
            remaining = max(
                100, SHUTDOWN_WAIT_MS - int((time.monotonic() - started) * 1000)
            )
            if not thread.wait(remaining):
                log.warning(
                    "the %s thread did not stop in time (a model still loading?)",
                    thread.objectName(),
                )
                STUCK_THREADS.append(thread)
                stopped = False
        return stopped

    def hand_over(self, owner: QObject) -> None:
        """Make ``owner`` the Qt parent of the stopped threads and their objects.

        They are then deleted with it, on the UI thread, never by Python's garbage
        collector on some other thread.
        """
        for thing in (
            self.worker,
            self.documents,
            self.sampler,
            self.worker_thread,
            self.documents_thread,
            self.sampler_thread,
        ):
            if thing.thread() is owner.thread() and not (
                isinstance(thing, QThread) and thing.isRunning()
            ):
                thing.setParent(owner)

    def release_engine(self) -> None:
        """Stop the engine's own thread (after the worker stopped)."""
        try:
            self.worker.engine.shutdown(timeout=0.5)
        except Exception as exc:  # quitting goes on whatever the engine says
            log.warning("engine shutdown: %s", exc, exc_info=exc)
