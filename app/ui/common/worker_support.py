"""What the app's worker objects (generation, documents) share: errors and parking.

Both run on a QThread of their own and report failures to the window the same way; a
bug and an environment fault must read alike whichever thread they happened on.
"""

from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass

from PySide6.QtCore import QCoreApplication, QObject, QThread

from app.core.errors import KnownError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerError:
    """A failure on a worker thread, ready to show.

    Attributes:
        message: For the user: the `KnownError`'s words, or a generic sentence for a bug.
        known: True for a `KnownError` (an environment fault or a refusal), False for a bug.
        details: The traceback of a bug, empty otherwise.
    """

    message: str
    known: bool
    details: str = ""


def worker_error(exc: BaseException, doing: str) -> WorkerError:
    """The `WorkerError` for ``exc``, raised while ``doing`` (a bug is also logged)."""
    if isinstance(exc, KnownError):
        return WorkerError(str(exc), True)
    log.error("bug while %s", doing, exc_info=exc)
    return WorkerError(
        f"Something went wrong while {doing} ({type(exc).__name__}: {exc}). "
        "This is a bug in Swapless; the details were written to the log.",
        False,
        "".join(traceback.format_exception(exc)),
    )


def park_on_main_thread(worker: QObject) -> None:
    """Move ``worker`` back to the main thread and stop the thread it ran on.

    Must run on the worker's own thread: objects may only be pushed from their own
    thread. Back on the main thread the worker can be deleted after its thread has
    stopped, without Qt warnings; the thread is stopped after the move, so no queued
    request is lost.
    """
    thread = QThread.currentThread()
    app = QCoreApplication.instance()
    assert app is not None, "workers exist only while the application does"
    worker.moveToThread(app.thread())
    thread.quit()
