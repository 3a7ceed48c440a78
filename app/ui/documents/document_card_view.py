"""The document card above the composer: the plan, the progress, the notes, Stop/Resume.

One card shows the reading of the open conversation, whatever its state: the plan in
one line with a switch between a whole read and segments and a Start button; while it
runs a progress bar (segment i of N, tokens read, tokens/s, time left), the notes of
the last finished segment as they are written and the answer as it streams; when it was
stopped, what was kept and a Resume (or "Continue in segments") button. Layout only:
the `DocumentController` fills it and reacts to its signals.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.ui.common.elided_label import ElidedLabel
from app.ui.common.plain_text import plain_tooltip

NOTES_LINES = 5
PROGRESS_STEPS = 1000


class DocumentCardView(QFrame):
    """Plan, progress and outcome of one reading."""

    start_clicked = Signal()
    switch_clicked = Signal()
    stop_clicked = Signal()
    resume_clicked = Signal()
    dismiss_clicked = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("documentCard")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        column = QVBoxLayout(self)
        column.setContentsMargins(12, 6, 12, 6)
        column.setSpacing(4)
        header = QHBoxLayout()
        self.title_label = QLabel()
        self.title_label.setObjectName("documentTitle")
        self.title_label.setTextFormat(Qt.TextFormat.PlainText)
        font = self.title_label.font()
        font.setBold(True)
        self.title_label.setFont(font)
        header.addWidget(self.title_label)
        self.line_label = ElidedLabel()
        self.line_label.setObjectName("documentLine")
        header.addWidget(self.line_label, 1)
        self.switch_button = QPushButton()
        self.start_button = QPushButton("Start")
        self.stop_button = QPushButton("Stop")
        self.resume_button = QPushButton("Resume")
        self.dismiss_button = QPushButton("Dismiss")
        for button, signal in (
            (self.switch_button, self.switch_clicked),
            (self.start_button, self.start_clicked),
            (self.stop_button, self.stop_clicked),
            (self.resume_button, self.resume_clicked),
            (self.dismiss_button, self.dismiss_clicked),
        ):
            button.clicked.connect(signal)
            header.addWidget(button)
        column.addLayout(header)
        # The question typed before attaching: it left the message box, so it is here.
        self.question_label = ElidedLabel()
        self.question_label.setObjectName("documentQuestion")
        column.addWidget(self.question_label)
        self.progress_bar = QProgressBar()
        self.progress_bar.setRange(0, PROGRESS_STEPS)
        self.progress_bar.setTextVisible(False)
        self.progress_bar.setFixedHeight(8)
        column.addWidget(self.progress_bar)
        self.notes_label = QLabel()
        self.notes_label.setObjectName("documentNotesTitle")
        self.notes_label.setTextFormat(Qt.TextFormat.PlainText)
        column.addWidget(self.notes_label)
        self.notes_view = QPlainTextEdit()
        self.notes_view.setObjectName("documentNotes")
        self.notes_view.setReadOnly(True)
        line = self.notes_view.fontMetrics().lineSpacing()
        self.notes_view.setFixedHeight(NOTES_LINES * line + 12)
        column.addWidget(self.notes_view)
        self.hide()

    # -- states ----------------------------------------------------------------------

    def show_planning(self, name: str, text: str) -> None:
        """The plan is being made (counting tokens, measuring the speed)."""
        self._state(name, text, buttons=(self.stop_button,))
        self.stop_button.setText("Cancel")

    def show_plan(
        self, name: str, line: str, tooltip: str, switch_text: str, switch_tip: str
    ) -> None:
        """The plan, waiting for Start; ``switch_text`` "" when there is no other way."""
        self._state(
            name,
            line,
            buttons=(self.switch_button, self.start_button, self.dismiss_button),
        )
        self.line_label.setToolTip(plain_tooltip(tooltip))
        self.switch_button.setText(switch_text)
        self.switch_button.setToolTip(plain_tooltip(switch_tip))
        self.switch_button.setVisible(bool(switch_text))
        self.switch_button.setEnabled(bool(switch_tip) or bool(switch_text))

    def show_running(self, name: str, line: str) -> None:
        """The reading runs: progress and notes follow."""
        self._state(name, line, buttons=(self.stop_button,))
        self.stop_button.setText("Stop")
        self.progress_bar.show()

    def show_stopped(self, name: str, text: str, resume_text: str) -> None:
        """Stopped; ``resume_text`` "" when it cannot be resumed from here."""
        buttons = (self.resume_button, self.dismiss_button)
        self._state(name, text, buttons=buttons if resume_text else buttons[1:])
        self.resume_button.setText(resume_text or "Resume")

    def set_progress(self, fraction: float, text: str) -> None:
        """Move the bar and say where the reading is."""
        self.progress_bar.setValue(round(max(0.0, min(1.0, fraction)) * PROGRESS_STEPS))
        self.line_label.set_plain(text)
        self.line_label.setToolTip(plain_tooltip(text))

    def set_question(self, question: str) -> None:
        """Show the question the reading answers ("" asks for a summary)."""
        text = question.strip()
        self.question_label.set_plain(
            f"Question: {text}" if text else "Question: none (a summary is written)"
        )
        self.question_label.setToolTip(plain_tooltip(text) if text else "")
        self.question_label.show()

    def set_notes(self, title: str, text: str) -> None:
        """Show notes (or the answer being written) under the bar."""
        self.notes_label.setText(title)
        self.notes_label.setVisible(bool(title))
        self.notes_view.setPlainText(text)
        self.notes_view.setVisible(bool(title))
        bar = self.notes_view.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _state(self, name: str, text: str, buttons) -> None:
        self.title_label.setText(name)
        self.line_label.set_plain(text)
        self.line_label.setToolTip(plain_tooltip(text))
        for button in (
            self.switch_button,
            self.start_button,
            self.stop_button,
            self.resume_button,
            self.dismiss_button,
        ):
            button.setVisible(button in buttons)
        self.progress_bar.hide()
        self.question_label.hide()
        self.set_notes("", "")
        self.show()


class DocumentProgressView(QFrame):
    """The reading's progress in the status area, whichever conversation is open."""

    clicked = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("documentProgress")
        row = QVBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.setSpacing(2)
        self.label = ElidedLabel()
        row.addWidget(self.label)
        self.bar = QProgressBar()
        self.bar.setRange(0, PROGRESS_STEPS)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(6)
        row.addWidget(self.bar)
        self.hide()

    def set_progress(self, fraction: float, text: str) -> None:
        """Show the reading's state."""
        self.bar.setValue(round(max(0.0, min(1.0, fraction)) * PROGRESS_STEPS))
        self.label.set_plain(text)
        self.setToolTip(plain_tooltip(text + "\n(click to open its conversation)"))
        self.show()

    def mousePressEvent(self, event) -> None:
        self.clicked.emit()
        super().mousePressEvent(event)
