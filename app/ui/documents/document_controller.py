"""Reading documents: attach or drop a file, see the plan, start, follow, stop, resume.

The flow a user sees: a file is attached (Attach…, or dropped on the window or the
composer) and what was typed becomes the question. The `DocumentWorker` checks and
plans it off the UI thread; the card above the composer shows the plan in one line
(whole or N segments of ~K tokens, KV peak, time estimate) with a switch between a
whole read and segments, and Start. While it runs, the card and the status area show
a progress bar (segment i of N, tokens read, tokens/s, time left), the notes of each
finished segment as they are written and the answer as it streams. Stop answers within
a second and keeps the finished segments' notes; the card then offers Resume, or
"Continue in segments" for a stopped whole read — also after a restart, from what the
store kept (`app.core.longdoc.stored_readings`).

A reading runs on its own thread, so the other conversations stay usable: they show
their own state and can chat meanwhile; only the conversation being read waits.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from app.core.presets.presets import get_preset
from app.ui.common.dialogs import show_failure
from app.ui.common.throttle import Throttle
from app.ui.documents.document_drop import FileDropFilter
from app.ui.documents.document_readings import (
    NEW_CHAT,
    Reading,
    mark_stopped,
    note_progress,
    note_segment,
    note_started,
    reading_from_store,
    show_reading,
)
from app.ui.documents.document_worker import DocumentRequest, PlanOffer

log = logging.getLogger(__name__)

NAME_FILTERS = [
    "Documents (*.txt *.md *.markdown *.rst *.log *.csv *.json *.html *.htm *.pdf "
    "*.docx *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java *.rb *.sh *.toml *.yaml "
    "*.yml *.xml *.tex)",
    "All files (*)",
]


class DocumentController(QObject):
    """Attach documents and follow their readings.

    Args:
        worker: The `DocumentWorker` (on its own thread).
        chat_worker: The generation worker (it re-measures a conversation afterwards).
        store: The open store.
        turns: The `TurnController` (shows the stored conversation).
        current: The `CurrentConversationController`.
        models: The `ModelController` (no model: nothing to read with).
        composer: The message box (its text is the question).
        card: The `DocumentCardView` above the composer.
        progress: The `DocumentProgressView` in the status area.
        window: Parent of the file dialog.
    """

    conversation_created = Signal(int)
    plan_shown = Signal(object, object)  # conversation id or None, PlanOffer
    document_started = Signal(int, object, str)  # conversation id, RunStarted, name
    document_progressed = Signal(int, object)  # SegmentStarted or ReadingProgress
    segment_read = Signal(int, object)  # SegmentFinished
    document_finished = Signal(int, object)  # conversation id, RunFinished
    document_failed = Signal(object, object)  # conversation id or None, WorkerError
    busy_changed = Signal(bool)
    refused = Signal(str)  # an attach that cannot happen now, in words

    def __init__(
        self,
        worker,
        chat_worker,
        store,
        turns,
        current,
        models,
        composer,
        card,
        progress,
        window: QWidget,
    ):
        super().__init__(window)
        self._worker = worker
        self._chat_worker = chat_worker
        self._store = store
        self._turns = turns
        self._current = current
        self._models = models
        self._composer = composer
        self._card = card
        self._progress = progress
        self._window = window
        self.readings: dict[object, Reading] = {}
        self.file_dialog: QFileDialog | None = None
        self.error_dialog: QMessageBox | None = None
        self._repaint = Throttle(self._show_card, parent=self)
        worker.plan_ready.connect(self._on_worker_plan_ready)
        worker.plan_failed.connect(self._on_worker_plan_failed)
        worker.run_started.connect(self._on_worker_run_started)
        worker.run_progressed.connect(self._on_worker_run_progressed)
        worker.segment_finished.connect(self._on_worker_segment_finished)
        worker.answer_received.connect(self._on_worker_answer_received)
        worker.run_finished.connect(self._on_worker_run_finished)
        worker.run_failed.connect(self._on_worker_run_failed)
        composer.attach_requested.connect(self.choose)
        current.opened.connect(self._on_current_opened)
        card.start_clicked.connect(self.start)
        card.switch_clicked.connect(self.switch)
        card.stop_clicked.connect(self.stop)
        card.resume_clicked.connect(self.resume)
        card.dismiss_clicked.connect(self.dismiss)
        progress.clicked.connect(self._on_progress_clicked)
        turns.blocked = self.blocked_reason
        # A file dropped on the window or the message box is read like one attached.
        self.drops = FileDropFilter(self.attach, self)
        for widget in (window, composer, composer.edit.viewport()):
            self.drops.watch(widget)

    # -- state -------------------------------------------------------------------------

    @property
    def active(self) -> Reading | None:
        """The reading being planned or read, if any (one at a time)."""
        return next(
            (r for r in self.readings.values() if r.phase in ("planning", "running")),
            None,
        )

    def waiting_words(self) -> str | None:
        """What a reply in another conversation shows while it waits for the reading.

        The reading holds the model's thread between its steps, so a message sent
        elsewhere starts (or its summary is written) when a step ends; the footer says
        so instead of a silent "Summarising…".
        """
        reading = self.active
        if reading is None or reading.phase != "running":
            return None
        return (
            f"Waiting for the model: it is reading {reading.name} "
            f"({round(100 * reading.fraction)} %); Stop on its card ends the reading "
            "and keeps its notes."
        )

    @property
    def busy(self) -> bool:
        """True while a document is planned or read (the model must not change)."""
        return self.active is not None

    def shown(self) -> Reading | None:
        """The reading of the open conversation, if it has one."""
        cid = self._current.conversation_id
        reading = self.readings.get(NEW_CHAT if cid is None else cid)
        if reading is not None and reading.key == NEW_CHAT and reading.left:
            return None
        return reading

    def blocked_reason(self, conversation_id) -> str | None:
        """Why the composer of ``conversation_id`` cannot send now, or None."""
        reading = self.readings.get(
            NEW_CHAT if conversation_id is None else conversation_id
        )
        if reading is None or reading.phase not in ("planning", "running"):
            return None
        return (
            f"Reading {reading.name}: this conversation waits for it. Stop it on the "
            "card (Esc) to write here; other conversations work meanwhile."
        )

    # -- what the user does ------------------------------------------------------------

    def choose(self) -> None:
        """Ask for a document to read (a non-blocking file dialog)."""
        dialog = QFileDialog(self._window, "Read a document")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setNameFilters(NAME_FILTERS)
        dialog.fileSelected.connect(self.attach)
        dialog.open()
        self.file_dialog = dialog

    def attach(self, path: str, mode: str = "auto") -> bool:
        """Plan the reading of ``path`` into the open conversation; False if refused.

        The conversation's preset is used when it reads in segments, else the built-in
        long-document preset.
        """
        if not path:
            return False
        reason = self._cannot_start()
        if reason:
            self.refused.emit(reason)
            return False
        question = self._composer.take_text()
        preset = self._current.preset()
        if not preset.segmenting:
            preset = get_preset("long-document")
        cid = self._current.conversation_id
        request = DocumentRequest(cid, str(path), question, preset, mode)
        self._plan(Reading(NEW_CHAT if cid is None else cid, Path(path).name, request))
        return True

    def start(self) -> None:
        """Start the reading whose plan is shown."""
        reading = self.shown()
        if reading is None or reading.phase != "planned" or reading.offer is None:
            return
        reading.phase = "running"
        reading.line = reading.offer.plan.line
        self._worker.start(reading.offer)
        self._changed(reading)

    def switch(self) -> None:
        """Plan the shown document the other way (whole ⇄ segments)."""
        reading = self.shown()
        if reading is None or reading.phase != "planned" or reading.offer is None:
            return
        other = "whole" if reading.offer.plan.mode == "segments" else "segments"
        reading.phase = "planning"
        reading.line = "Planning the other way…"
        self._worker.switch(reading.offer, other)
        self._changed(reading)

    def stop(self) -> None:
        """Stop the reading being planned or read (its finished notes are kept)."""
        reading = self.active
        if reading is None:
            return
        self._worker.cancel()
        if reading.phase == "planning":  # nothing read yet: forget it
            del self.readings[reading.key]
        reading.line = "Stopping…"
        self._changed(reading)

    def stop_here(self) -> bool:
        """Stop the reading the open conversation waits for; False if there is none.

        Esc calls it first: it stops what the open conversation waits for, its
        document, and otherwise the reply being written.
        """
        if not self.blocked_reason(self._current.conversation_id):
            return False
        self.stop()
        return True

    def resume(self) -> None:
        """Continue the shown stopped reading (whole reads: in segments)."""
        reading = self.shown()
        if reading is None or reading.phase != "stopped":
            return
        reason = self._cannot_start()
        if reason:
            self.refused.emit(reason)
            return
        request = replace(reading.request, mode=reading.resume_mode)
        resumed = Reading(reading.key, reading.name, request, start_when_planned=True)
        self._plan(resumed)

    def dismiss(self) -> None:
        """Forget the shown plan or stopped reading (the store keeps the notes)."""
        reading = self.shown()
        if reading is not None and reading.phase in ("planned", "stopped"):
            del self.readings[reading.key]
            # The question left the message box when the file was attached: give it
            # back, unless something new was typed since.
            question = reading.request.question
            if reading.phase == "planned" and question and not self._composer.text():
                self._composer.set_text(question)
            self._show_card()

    def shutdown(self) -> None:
        """The window closes: stop any reading now (its notes are kept)."""
        self._worker.cancel()
        self._repaint.cancel()

    # -- internals ---------------------------------------------------------------------

    def _cannot_start(self) -> str | None:
        if self._models.info is None or self._models.loading:
            return "Load a model first: documents are read with the loaded model."
        if self.active is not None:
            return (
                f"{self.active.name} is being read; stop it first or wait for it "
                "(one document at a time)."
            )
        if self._turns.live_conversation_id == self._current.conversation_id and (
            self._turns.busy
        ):
            return "A reply is being written here; wait for it or stop it first."
        return None

    def _plan(self, reading: Reading) -> None:
        self.readings[reading.key] = reading
        reading.line = "Planning: counting tokens and measuring this machine's speed…"
        self._worker.plan(reading.request)
        self._changed(reading)

    def _reading_of(self, request: DocumentRequest) -> Reading | None:
        return next(
            (
                r
                for r in self.readings.values()
                if r.phase == "planning"
                and (r.request.path, r.request.conversation_id)
                == (request.path, request.conversation_id)
            ),
            None,
        )

    def _reading_running(self, conversation_id) -> Reading | None:
        reading = self.readings.get(conversation_id)
        if reading is None and conversation_id is None:
            reading = self.readings.get(NEW_CHAT)
        return reading

    def _changed(self, reading: Reading) -> None:
        """The reading changed state: show it now (progress alone is throttled)."""
        self._repaint.cancel()
        self._show_card()
        self._show_progress()
        self._turns.refresh_composer()
        self.busy_changed.emit(self.busy)

    def _show_card(self) -> None:
        show_reading(self._card, self.shown())

    def _show_progress(self) -> None:
        reading = self.active
        if reading is None or reading.phase != "running":
            self._progress.hide()
            return
        self._progress.set_progress(reading.fraction, f"{reading.name}: {reading.line}")

    # -- worker signals ----------------------------------------------------------------

    def _on_worker_plan_ready(self, offer: PlanOffer) -> None:
        reading = self._reading_of(offer.request)
        if reading is None:
            return
        reading.offer = offer
        reading.request = offer.request
        reading.phase = "planned"
        reading.line = offer.plan.line
        if reading.start_when_planned and self.shown() is reading:
            self.start()
        elif reading.start_when_planned:  # resumed from a conversation not shown now
            reading.phase = "running"
            self._worker.start(offer)
            self._changed(reading)
        else:
            self._changed(reading)
        self.plan_shown.emit(offer.request.conversation_id, offer)

    def _on_worker_plan_failed(self, request, error) -> None:
        reading = self._reading_of(request)
        if reading is not None:
            del self.readings[reading.key]
            if self.shown() is None and not self._composer.text().strip():
                self._composer.set_text(request.question)
            self._changed(reading)
        self._failed(request.conversation_id, error)

    def _on_worker_run_started(self, conversation_id: int, event) -> None:
        reading = self.readings.get(conversation_id) or self.readings.get(NEW_CHAT)
        if reading is None:
            return
        if reading.key == NEW_CHAT:
            del self.readings[NEW_CHAT]
            reading.key = conversation_id
            reading.request = replace(reading.request, conversation_id=conversation_id)
            self.readings[conversation_id] = reading
            if not reading.left and self._current.conversation_id is None:
                self._current.adopt(conversation_id)
            self.conversation_created.emit(conversation_id)
        if conversation_id == self._current.conversation_id:
            self._turns.show_current()  # the request the run just stored
        note_started(reading, event)
        self.document_started.emit(conversation_id, event, reading.name)
        self._changed(reading)

    def _on_worker_run_progressed(self, conversation_id: int, event) -> None:
        reading = self._reading_running(conversation_id)
        if reading is None:
            return
        note_progress(reading, event)
        self.document_progressed.emit(conversation_id, event)
        self._repaint.trigger()
        self._show_progress()

    def _on_worker_segment_finished(self, conversation_id: int, event) -> None:
        reading = self._reading_running(conversation_id)
        if reading is None:
            return
        note_segment(reading, event)
        self.segment_read.emit(conversation_id, event)
        self._repaint.trigger()

    def _on_worker_answer_received(self, conversation_id: int, text: str) -> None:
        reading = self._reading_running(conversation_id)
        if reading is None:
            return
        reading.answer += text
        reading.notes_title = "Answer (being written)"
        reading.notes = reading.answer
        self._repaint.trigger()

    def _on_worker_run_finished(self, conversation_id: int, event) -> None:
        reading = self._reading_running(conversation_id)
        self._repaint.flush()
        if reading is not None:
            if event.cancelled:
                mark_stopped(reading, event)
            else:
                del self.readings[reading.key]
        self._after_run(conversation_id)
        self.document_finished.emit(conversation_id, event)
        if reading is not None:
            self._changed(reading)

    def _on_worker_run_failed(self, conversation_id, error) -> None:
        reading = self._reading_running(conversation_id)
        if reading is not None:
            del self.readings[reading.key]
            self._changed(reading)
        if conversation_id is not None:
            self._after_run(conversation_id)
        self._failed(conversation_id, error)

    def _after_run(self, conversation_id: int) -> None:
        # The run used (and freed) the conversation's cache key: its session restarts.
        self._chat_worker.forget_conversation(conversation_id)
        self._chat_worker.measure_context(conversation_id, None)
        if conversation_id == self._current.conversation_id:
            self._turns.show_current()

    def _failed(self, conversation_id, error) -> None:
        if not error.known:
            self.error_dialog = show_failure(
                self._window, "Reading the document failed", error
            )
        self.document_failed.emit(conversation_id, error)

    def _on_current_opened(self, conversation_id, _reveal) -> None:
        new = self.readings.get(NEW_CHAT)
        if new is not None and conversation_id is not None:
            new.left = True
        if conversation_id is not None and conversation_id not in self.readings:
            self._offer_stored(conversation_id)
        self._show_card()
        self._turns.refresh_composer()  # only the conversation being read waits

    def _offer_stored(self, conversation_id: int) -> None:
        """A conversation opened with a reading stopped in an earlier run: offer it."""
        from app.core.errors import KnownError
        from app.core.longdoc.stored_readings import stopped_reading

        try:
            found = stopped_reading(self._store, conversation_id)
        except KnownError as exc:
            log.warning("conversation %s: %s", conversation_id, exc)
            return
        if found is not None:
            preset = self._current.preset()
            if not preset.segmenting:
                preset = get_preset("long-document")
            self.readings[conversation_id] = reading_from_store(found, preset)

    def _on_progress_clicked(self) -> None:
        reading = self.active
        if reading is not None and isinstance(reading.key, int):
            self._current.open(reading.key)
