"""Check quality of the loaded model from the app, and the stored results of that model.

The check is the one `swapless check-quality` runs: `plan_check` decides the cells and
`start_quality_check` queues the job on the engine's thread. A pool thread (`TaskSet`)
only relays its frozen events, so the UI never waits; Stop sets the check's cancel
token and the last event still carries every cell measured so far. The report is saved
in the store on the UI thread, then `results_changed` tells the preset picker, the
preset editor and the Models dialog to read the model's latest results again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, QThreadPool, Signal

from app.core.errors import KnownError
from app.core.quality.events import (
    CancelToken,
    CellMeasured,
    QualityProgress,
    QualityReport,
)
from app.ui.common.background import TaskSet

log = logging.getLogger(__name__)

NO_MODEL = "Load a model first: the check measures the loaded model."
BUSY = "Stop the reply first, then check quality."
RUNNING = "A quality check is already running."
SHUTDOWN_WAIT_S = 3.0
"""How long closing the window waits for a stopped check's last forward pass."""
_relay_pool: QThreadPool | None = None


def _relay_threads() -> QThreadPool:
    """The pool of the threads that relay a check's events (one check at a time).

    A check waits on the engine for up to minutes; on a 2-core machine Qt's global pool
    has two threads, which a download and a check would then both hold. The pool is
    never deleted before the process ends: deleting a pool waits for its jobs.
    """
    global _relay_pool
    if _relay_pool is None:
        _relay_pool = QThreadPool()
        _relay_pool.setObjectName("swapless-quality-relay")
    return _relay_pool


class QualityCheckController(QObject):
    """Runs quality checks of the loaded model and reads its stored results.

    Args:
        worker: The generation worker (its engine runs the check).
        models: The `ModelController` (which model is loaded).
        store: The open store (results are saved and read there).
        is_busy: True while a reply is being written (no check starts then).
        parent: The window.

    Attributes:
        sizes: Probe sizes other than the quick set (tests use smaller ones).
        only: Cell keys to measure instead of the whole grid (tests), or None.
    """

    check_started = Signal(object)  # CheckPlan
    check_progressed = Signal(object)  # QualityProgress
    cell_measured = Signal(object)  # CellResult
    check_finished = Signal(object)  # QualityReport (complete or stopped)
    check_failed = Signal(str)
    check_refused = Signal(str)
    results_changed = Signal(str)  # model identity

    def __init__(self, worker, models, store, is_busy: Callable[[], bool], parent):
        super().__init__(parent)
        self._worker = worker
        self._models = models
        self._store = store
        self._is_busy = is_busy
        self._tasks = TaskSet(self, pool=_relay_threads())
        self._cancel: CancelToken | None = None
        # Written by the relay thread when the check's job ends: what closing the
        # window saves, since the report's delivery to the UI thread never comes then.
        self._ended = threading.Event()
        self._ended_report: QualityReport | None = None
        self.sizes = None
        self.only: list[str] | None = None
        self.last_report = None
        self._panel = None
        self._progress: QualityProgress | None = None
        models.loaded.connect(self._on_models_loaded)

    @property
    def running(self) -> bool:
        """True from `start` until the check's report (or failure) arrived."""
        return self._cancel is not None

    def waiting_words(self) -> str | None:
        """What a reply sent now shows while it waits for the check, or None.

        The check holds the model's thread, so a message sent during it starts when
        the check ends; the reply's footer says so instead of a silent "Thinking…".
        """
        if not self.running:
            return None
        progress = self._progress
        share = f" ({100 * progress.done // progress.total} %)" if progress else ""
        return (
            f"Waiting for the quality check to finish{share}; Stop in Models… ends it "
            "and keeps what it measured."
        )

    def stored(self) -> dict | None:
        """The loaded model's latest stored result per cell, or None without a model.

        An unreadable store reads as "nothing measured": the annotations are advice,
        never a reason to stop the user.
        """
        info = self._models.info
        if info is None:
            return None
        try:
            return self._store.latest_quality(info.identity)
        except KnownError as exc:
            log.warning("stored quality results cannot be read: %s", exc)
            return {}

    def start(self) -> bool:
        """Start the quick check of the loaded model; False (and why) when refused."""
        from app.core.engine.quality.quality_run import start_quality_check
        from app.core.quality.plan import plan_check

        info = self._models.info
        if self.running:
            self.check_refused.emit(RUNNING)
            return False
        if info is None:
            self.check_refused.emit(NO_MODEL)
            return False
        if self._is_busy():
            self.check_refused.emit(BUSY)
            return False
        try:
            plan = plan_check(
                Path(info.folder), quick=True, only=self.only, sizes=self.sizes
            )
        except (KnownError, ValueError) as exc:
            self.check_refused.emit(str(exc))
            return False
        cancel = CancelToken()
        self._cancel = cancel
        self._progress = None
        engine = self._worker.engine
        ended = self._ended = threading.Event()
        self._ended_report = None

        def work(report):
            try:
                run = start_quality_check(engine, plan, cancel)
                for event in run:
                    if isinstance(event, QualityProgress | CellMeasured):
                        report(event)
                self._ended_report = run.report
                return run.report
            finally:
                ended.set()

        self.check_started.emit(plan)
        self._tasks.start(
            work,
            on_finished=self._on_check_done,
            on_failed=self._on_check_error,
            on_progress=self._on_check_event,
        )
        return True

    def stop(self) -> None:
        """Stop after the current forward pass; the cells measured are kept and saved."""
        if self._cancel is not None:
            self._cancel.cancel()

    def shutdown(self) -> None:
        """Stop a running check and save the cells it measured (the window closes).

        Waits up to `SHUTDOWN_WAIT_S` for the check's current forward pass; a check
        that does not end by then loses only what it measured in this run.
        """
        if self._cancel is None:
            return
        self._cancel.cancel()
        self._cancel = None  # a report delivered after this is not saved twice
        if not self._ended.wait(SHUTDOWN_WAIT_S):
            log.warning("the quality check did not stop in time; its cells are lost")
            return
        report = self._ended_report
        if report is not None and report.results:
            try:
                self._store.save_quality_report(report)
            except KnownError as exc:
                log.warning("the quality results could not be saved: %s", exc)

    def attach_panel(self, panel) -> None:
        """Drive the Models dialog's `QualityPanelView` (once, when it is built)."""
        self._panel = panel
        panel.check_requested.connect(self.start)
        panel.stop_requested.connect(self.stop)
        self.check_started.connect(lambda _plan: panel.set_running(True))
        self.check_progressed.connect(panel.show_progress)
        self.cell_measured.connect(panel.add_result)
        self.check_finished.connect(panel.show_finished)
        self.check_failed.connect(panel.show_failure)
        self.check_refused.connect(panel.show_refusal)
        self.results_changed.connect(lambda _identity: self.show_stored())
        self.show_stored()

    def show_stored(self) -> None:
        """Show the loaded model's stored results in the panel (unless a check runs)."""
        if self._panel is None or self.running:
            return
        info = self._models.info
        self._panel.set_model(
            Path(info.folder).name if info is not None else None, self.stored()
        )

    def _on_check_event(self, event) -> None:
        if isinstance(event, QualityProgress) and event.total:
            self._progress = event
        if isinstance(event, CellMeasured):
            self.cell_measured.emit(event.result)
        else:
            self.check_progressed.emit(event)

    def _on_check_done(self, report) -> None:
        if self._cancel is None:
            return  # saved by `shutdown` already
        self._cancel = None
        self.last_report = report
        if report is not None and report.results:
            try:
                self._store.save_quality_report(report)
            except KnownError as exc:
                self.check_failed.emit(f"The results could not be saved: {exc}")
                return
        if report is None:
            self.check_failed.emit("The quality check ended without a report.")
            return
        # The annotations first: the panel then shows this check's own rows and end.
        self.results_changed.emit(report.model_identity)
        self.check_finished.emit(report)

    def _on_check_error(self, exc: Exception) -> None:
        self._cancel = None
        if isinstance(exc, KnownError):
            self.check_failed.emit(str(exc))
            return
        log.error("the quality check failed", exc_info=exc)
        self.check_failed.emit(
            f"The quality check failed ({type(exc).__name__}: {exc}). This is a bug "
            "in Swapless; the details were written to the log."
        )

    def _on_models_loaded(self, info) -> None:
        self.results_changed.emit(info.identity)
