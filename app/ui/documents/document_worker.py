"""The document worker: plans and reads long documents on a thread of their own.

A reading takes minutes. On the generation worker's thread it would block every other
conversation (no reply, no context meter) until it ended, so documents get their own
`QObject` on their own `QThread`, sharing the engine: the engine runs one request at a
time on its thread, so a chat turn in another conversation simply runs between two of
the reading's steps, and the memory guard counts both caches.

Requests (`plan`, `switch`, `start`) are queued to the thread by private signals;
`cancel` is thread-safe and stops the plan's speed probe or the reading within a second
(the engine checks the token between prefill chunks). Results come back as signals
carrying the core's frozen events.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal, Slot

from app.core.cancel import CancelToken
from app.core.errors import BudgetError, KnownError
from app.core.presets.presets import Preset
from app.ui.common.worker_support import WorkerError, park_on_main_thread, worker_error

if TYPE_CHECKING:  # imported on the worker thread, where they are used
    from app.core.longdoc.plan.planning import RunPlan
    from app.core.longdoc.reading.reader import DocumentText

log = logging.getLogger(__name__)


# A refusal in the window names the window's controls, not the command's options
# (`app.core.longdoc.plan.mode.Controls`; long-document mode is imported when used).
APP_CONTROL_NAMES = {
    "segments": "Read in segments on the card",
    "segment_tokens": "Segment size in Edit preset…",
    "notes_tokens": "Summary length in Edit preset…",
    "max_tokens": "Reply length in Edit preset…",
}


@dataclass(frozen=True)
class DocumentRequest:
    """What the user asked to read.

    Attributes:
        conversation_id: Where to record it (None: a new conversation).
        path: The file.
        question: What to answer ("" asks for a summary).
        preset: Settings of the reading.
        mode: ``auto``, ``whole`` or ``segments``.
    """

    conversation_id: int | None
    path: str
    question: str
    preset: Preset
    mode: str = "auto"


@dataclass(frozen=True)
class PlanOffer:
    """A plan shown before the reading starts.

    Attributes:
        request: The request it answers.
        document: The checked document.
        plan: The plan (`RunPlan`) of the chosen way.
        other: The other way's plan, its refusal in words (it does not fit), or None
            when it is only worked out if chosen (a whole read of a long document).
        resumes_at: Segment a reading of this plan continues at (0: from the start).
    """

    request: DocumentRequest
    document: DocumentText
    plan: RunPlan
    other: RunPlan | str | None
    resumes_at: int = 0


class DocumentWorker(QObject):
    """Plans and runs long-document readings on its own thread.

    Args:
        engine: The engine (the generation worker's).
        store: The open store.
        settings: App settings (the memory budget).
    """

    plan_ready = Signal(object)  # PlanOffer
    plan_failed = Signal(object, object)  # DocumentRequest, WorkerError
    run_started = Signal(int, object)  # conversation id, RunStarted
    run_progressed = Signal(int, object)  # SegmentStarted or ReadingProgress
    segment_finished = Signal(int, object)  # SegmentFinished
    answer_received = Signal(int, str)
    run_finished = Signal(int, object)  # RunFinished
    run_failed = Signal(object, object)  # conversation id (None: new), WorkerError

    _plan_requested = Signal(object, object)
    _switch_requested = Signal(object, str, object)
    _start_requested = Signal(object, object)
    _park_requested = Signal()

    def __init__(self, engine, store, settings):
        super().__init__()
        self.engine = engine
        self.store = store
        self.settings = settings
        self._lock = threading.Lock()
        self._token: CancelToken | None = None
        self._parked = False
        self._plan_requested.connect(self._on_plan_requested)
        self._switch_requested.connect(self._on_switch_requested)
        self._start_requested.connect(self._on_start_requested)
        self._park_requested.connect(self._on_park_requested)

    # -- requests (any thread) -------------------------------------------------------

    def plan(self, request: DocumentRequest) -> None:
        """Check the document and plan its reading; answers `plan_ready`."""
        self._plan_requested.emit(request, self._new_token())

    def switch(self, offer: PlanOffer, mode: str) -> None:
        """Plan the same document for another mode; answers `plan_ready`."""
        self._switch_requested.emit(offer, mode, self._new_token())

    def start(self, offer: PlanOffer) -> None:
        """Read the document as planned; answers `run_started` … `run_finished`."""
        self._start_requested.emit(offer, self._new_token())

    def cancel(self) -> None:
        """Stop the newest request within a second (thread-safe)."""
        with self._lock:
            token = self._token
        if token is not None:
            token.cancel()

    def park(self) -> None:
        """Finish what is queued, move back to the main thread, stop the thread."""
        self._park_requested.emit()

    def _new_token(self) -> CancelToken:
        token = CancelToken()
        with self._lock:
            self._token = token
        return token

    # -- work (the document thread) --------------------------------------------------

    def _runner(self, preset: Preset, token: CancelToken):
        from app.core.longdoc import LongDocumentRunner
        from app.core.longdoc.plan.mode import Controls

        return LongDocumentRunner(
            self.engine,
            self.store,
            preset,
            budget_settings=self.settings.budget(),
            cancel=token,
            controls=Controls(**APP_CONTROL_NAMES),
        )

    @Slot(object, object)
    def _on_plan_requested(self, request: DocumentRequest, token) -> None:
        if self._parked:
            return
        from app.core.longdoc import read_document
        from app.core.longdoc.plan.planning import PlanCancelled

        try:
            if self.engine.model_info is None:
                raise KnownError("No model is loaded.")
            document = read_document(request.path)
            runner = self._runner(request.preset, token)
            plan = runner.plan(document, request.question or None, request.mode)
            offer = self._offer(runner, request, document, plan)
        except PlanCancelled:
            return  # the user cancelled it; the card is gone already
        except Exception as exc:
            self.plan_failed.emit(request, self._error(exc, "planning the reading"))
            return
        self.plan_ready.emit(offer)

    @Slot(object, str, object)
    def _on_switch_requested(self, offer: PlanOffer, mode: str, token) -> None:
        if self._parked:
            return
        request = replace(offer.request, mode=mode)
        try:
            runner = self._runner(request.preset, token)
            plan = runner.planner.with_mode(offer.plan, mode, offer.document)
            offer = self._offer(runner, request, offer.document, plan)
        except Exception as exc:
            self.plan_failed.emit(request, self._error(exc, "planning the reading"))
            return
        self.plan_ready.emit(offer)

    def _offer(self, runner, request, document, plan) -> PlanOffer:
        from app.core.longdoc.resume import find_resumable_reading

        other_mode = "whole" if plan.mode == "segments" else "segments"
        if other_mode == "whole" and not plan.exact_count:
            other = None
        else:
            try:
                other = runner.planner.with_mode(plan, other_mode, document)
            except BudgetError as exc:
                other = str(exc)
        found = find_resumable_reading(
            self.store, document, plan, request.conversation_id
        )
        resumes_at = found.next_segment if found is not None else 0
        return PlanOffer(request, document, plan, other, resumes_at)

    @Slot(object, object)
    def _on_start_requested(self, offer: PlanOffer, token) -> None:
        if self._parked:
            return
        from app.core.longdoc import (
            AnswerChunk,
            RunFinished,
            RunStarted,
            SegmentFinished,
        )

        request = offer.request
        cid = request.conversation_id
        try:
            runner = self._runner(request.preset, token)
            events = runner.run(
                offer.document,
                offer.plan.question,
                conversation_id=cid,
                plan=offer.plan,
            )
            for event in events:
                if isinstance(event, AnswerChunk):
                    self.answer_received.emit(cid, event.text)
                elif isinstance(event, SegmentFinished):
                    self.segment_finished.emit(cid, event)
                elif isinstance(event, RunStarted):
                    cid = event.conversation_id
                    self.run_started.emit(cid, event)
                elif isinstance(event, RunFinished):
                    self.run_finished.emit(cid, event)
                else:  # SegmentStarted or ReadingProgress
                    self.run_progressed.emit(cid, event)
        except Exception as exc:
            self.run_failed.emit(cid, self._error(exc, "reading the document"))

    @Slot()
    def _on_park_requested(self) -> None:
        self._parked = True
        park_on_main_thread(self)

    def _error(self, exc: BaseException, doing: str) -> WorkerError:
        return worker_error(exc, doing)
