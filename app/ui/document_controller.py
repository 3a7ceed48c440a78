"""Reading a document into the open conversation: the file dialog, the run, its progress.

What is typed in the composer becomes the question (empty: a summary). The run is a
turn like any other (`TurnController.begin_turn` / `end_turn`, the answer streams in
the same way); this controller adds the document's progress in the reply's status line
and reports how the document is read, for the notice area. A later document UI (a
progress view, resuming) hangs off this controller's signals.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QWidget

from app.core.presets import get_preset
from app.core.text.display_numbers import format_bytes
from app.ui.turn_controller import LiveTurn

NAME_FILTERS = [
    "Text and Markdown (*.txt *.md *.markdown *.rst *.log *.csv *.json *.py *.html "
    "*.xml *.tex)",
    "All files (*)",
]


class DocumentController(QObject):
    """Attach a document and follow its reading.

    Args:
        worker: The generation worker.
        turns: The `TurnController`.
        current: The `CurrentConversationController`.
        composer: The message box (its text is the question).
        window: Parent of the file dialog.
    """

    document_started = Signal(int, object, str)  # conversation id, RunStarted, name
    document_progressed = Signal(int, object)  # SegmentStarted or SegmentFinished
    document_finished = Signal(int, object)  # conversation id, RunFinished

    def __init__(self, worker, turns, current, composer, window: QWidget):
        super().__init__(window)
        self._worker = worker
        self._turns = turns
        self._current = current
        self._composer = composer
        self._window = window
        self.file_dialog: QFileDialog | None = None
        self.name = ""
        worker.document_started.connect(self._on_worker_document_started)
        worker.document_progressed.connect(self._on_worker_document_progressed)
        worker.document_finished.connect(self._on_worker_document_finished)
        composer.attach_requested.connect(self.choose)

    def choose(self) -> None:
        """Ask for a text file to read (a non-blocking file dialog)."""
        dialog = QFileDialog(self._window, "Read a document")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setNameFilters(NAME_FILTERS)
        dialog.fileSelected.connect(self.attach)
        dialog.open()
        self.file_dialog = dialog

    def attach(self, path: str) -> bool:
        """Read the document at ``path`` of any length and answer about it.

        The conversation's preset is used when it reads in segments, else the built-in
        long-document preset.
        """
        from app.core.longdoc.prompts import DEFAULT_QUESTION, request_text

        if not path or not self._turns.can_start():
            return False
        question = self._composer.take_text()
        preset = self._current.preset()
        if not preset.segmenting:
            preset = get_preset("long-document")
        self.name = Path(path).name
        cid = self._current.conversation_id
        shown = request_text(self.name, question or DEFAULT_QUESTION)
        turn = LiveTurn(
            "document", cid, question, shown, footer="Reading the document…"
        )
        self._turns.begin_turn(turn)
        self._worker.read_document(cid, path, question, preset)
        return True

    def _on_worker_document_started(self, conversation_id: int, event) -> None:
        if event.resumed_from:
            how = f"resuming at part {event.resumed_from + 1} of {event.segments}"
        elif event.mode == "segments":
            how = f"{event.segments} parts"
        else:
            how = "read whole"
        self._turns.set_footer(
            f"{event.document_tokens:,} tokens, {how}; KV at most "
            f"{format_bytes(event.kv_bytes_limit)}"
        )
        self.document_started.emit(conversation_id, event, self.name)

    def _on_worker_document_progressed(self, conversation_id: int, event) -> None:
        if hasattr(event, "notes_tokens"):
            text = (
                f"Read part {event.index + 1} of {event.segments}: "
                f"{event.tokens_per_s:.1f} tok/s, KV {format_bytes(event.kv_bytes)}"
            )
        else:
            text = (
                f"Reading part {event.index + 1} of {event.segments} "
                f"({event.tokens:,} tokens)…"
            )
        self._turns.set_footer(text)
        self.document_progressed.emit(conversation_id, event)

    def _on_worker_document_finished(self, conversation_id: int, event) -> None:
        self._turns.end_turn(conversation_id)
        self.document_finished.emit(conversation_id, event)
