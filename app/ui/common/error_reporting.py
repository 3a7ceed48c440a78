"""Uncaught errors reach the log (with their traceback) and the user (with where it is).

An exception nobody caught, in a Qt slot (PySide6 hands those to ``sys.excepthook``) or
in a plain Python thread (``threading.excepthook``), used to print to a terminal the
user never sees. `ErrorReporter.install` makes both hooks write the traceback to the
log and show one dialog saying what happened and where the log is. A thread's hook only
posts the report: the dialog opens on the UI thread.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app.core.files import paths
from app.ui.common.dialogs import show_error

log = logging.getLogger(__name__)

# More reports than this in one run are logged only: a loop of errors must not bury the
# user in dialogs.
MAX_DIALOGS = 3


class ErrorReporter(QObject):
    """Receives uncaught exceptions from any thread.

    Args:
        parent_widget: Returns the widget dialogs are opened over (the main window), or
            None for a top-level dialog.
    """

    bug_reported = Signal(str, str)  # summary, traceback

    def __init__(self, parent_widget=lambda: None):
        super().__init__()
        self._parent_widget = parent_widget
        self._previous: tuple | None = None
        self.dialogs: list = []
        self.reports = 0
        self.bug_reported.connect(self._on_self_bug_reported)

    def install(self) -> None:
        """Take over ``sys.excepthook`` and ``threading.excepthook``."""
        if self._previous is None:
            self._previous = (sys.excepthook, threading.excepthook)
        sys.excepthook = self._on_exception
        threading.excepthook = self._on_thread_exception

    def uninstall(self) -> None:
        """Give the hooks back to whoever had them."""
        if self._previous is not None:
            sys.excepthook, threading.excepthook = self._previous
            self._previous = None

    def _on_exception(self, kind, value, tb, where: str = "the main thread") -> None:
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, value, tb)
            return
        details = "".join(traceback.format_exception(kind, value, tb))
        log.error("uncaught exception in %s:\n%s", where, details.rstrip())
        frames = traceback.extract_tb(tb)
        if frames:
            last = frames[-1]
            where = f"{where}, {last.filename}:{last.lineno} in {last.name}"
        self.reports += 1
        # Emitted from whatever thread failed; the dialog opens on the UI thread.
        self.bug_reported.emit(f"{kind.__name__}: {value} (in {where})", details)

    def _on_thread_exception(self, args) -> None:
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread is not None else "a thread"
        self._on_exception(
            args.exc_type, args.exc_value, args.exc_traceback, f"thread {name!r}"
        )

    def _on_self_bug_reported(self, summary: str, details: str) -> None:
        if len(self.dialogs) >= MAX_DIALOGS:
            return
        parent: QWidget | None = self._parent_widget()
        self.dialogs.append(
            show_error(
                parent,
                "Swapless hit a bug",
                f"Something went wrong: {summary}. The window goes on, but what was "
                "being done may be incomplete.\n\nThe details were written to the log: "
                f"{paths.logs_dir() / 'swapless.log'}",
                details,
            )
        )
