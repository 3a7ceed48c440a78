"""The Models dialog's "Quality on the loaded model" box: Check quality, progress, Stop, results.

Layout only: the `QualityCheckController` runs the check and the model picker
connects the two. The table shows the model's stored results when the dialog opens,
fills row by row while a check runs, and keeps the measured rows after a Stop. Words
and numbers come from `app.core.quality.report_text`, as in the CLI's table.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.quality.metrics import FAILS
from app.core.quality.report_text import EXPLANATION, measured_day, one_line

COLUMNS = ("Compression", "Top-1", "Mean KL", "PPL ratio", "Recall", "Verdict")
FAIL_COLOUR = "#cf222e"
STATUS_LINES = 2


def _cells(result) -> list[str]:
    def percent(value):
        return "—" if value is None else f"{value * 100:.1f} %"

    if result.error:
        return [result.cell.label, "—", "—", "—", "—", "not measured"]
    recall = (
        f"{result.recall_hits}/{result.recall_total} ({result.reference_hits})"
        if result.recall_total
        else "—"
    )
    return [
        result.cell.label,
        percent(result.top1_agreement),
        "—" if result.mean_kl is None else f"{result.mean_kl:.2e}",
        "—" if result.perplexity_ratio is None else f"{result.perplexity_ratio:.3f}",
        recall,
        result.verdict + ("" if result.complete else " (stopped)"),
    ]


class QualityPanelView(QGroupBox):
    """Check quality of the loaded model and show what was measured."""

    check_requested = Signal()
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Quality on the loaded model", parent)
        self.setObjectName("qualityPanel")
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        self.status_label = QLabel()
        self.status_label.setObjectName("qualityStatus")
        self.status_label.setTextFormat(Qt.TextFormat.PlainText)
        self.status_label.setWordWrap(True)
        # Two lines are kept for it (its texts take one or two), and the progress bar's
        # place is kept while hidden: the dialog moved under the mouse at a check's
        # start and end as they came and went.
        self.status_label.setMinimumHeight(
            STATUS_LINES * self.status_label.fontMetrics().lineSpacing()
        )
        self.status_label.setAlignment(
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop
        )
        row.addWidget(self.status_label, 1)
        self.check_button = QPushButton("Check quality")
        self.check_button.setToolTip(
            "Measure what 8/4-bit KV and trims cost in answers on the loaded model "
            "(quick probes; the results are saved and shown next to the presets)"
        )
        self.check_button.clicked.connect(self.check_requested)
        row.addWidget(self.check_button, 0, Qt.AlignmentFlag.AlignTop)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop; the compressions measured so far are kept")
        self.stop_button.setEnabled(False)
        self.stop_button.clicked.connect(self.stop_requested)
        row.addWidget(self.stop_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addLayout(row)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        policy = self.progress.sizePolicy()
        policy.setRetainSizeWhenHidden(True)
        self.progress.setSizePolicy(policy)
        self.progress.hide()
        layout.addWidget(self.progress)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("qualityTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(
            0, QHeaderView.ResizeMode.Stretch
        )
        self.table.setToolTip(EXPLANATION)
        self.table.setMaximumHeight(170)
        layout.addWidget(self.table)
        self.set_model(None, None)

    # -- what the controller tells it ---------------------------------------------------

    def set_model(self, name: str | None, stored: dict | None) -> None:
        """Show the loaded model's stored results (None: no model loaded)."""
        if self.stop_button.isEnabled():
            return  # a check is running: its rows are the news
        self.check_button.setEnabled(name is not None)
        self.table.setRowCount(0)
        if name is None:
            self.status_label.setText(
                "Load a model to check what compression costs on it."
            )
            return
        if not stored:
            self.status_label.setText(
                f"{name}: not measured yet. Check quality compares 8- and 4-bit KV and "
                "the trims with full precision on built-in probes."
            )
            return
        days = sorted({measured_day(entry.measured_at) for entry in stored.values()})
        self.status_label.setText(f"{name}: measured {', '.join(days)}.")
        for entry in stored.values():
            self.add_result(entry.result)

    def set_running(self, running: bool) -> None:
        """Switch between running (progress, Stop) and idle (Check quality)."""
        self.check_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.progress.setVisible(running)
        if running:
            self.table.setRowCount(0)
            self.progress.setValue(0)
            self.status_label.setText("Checking quality…")

    def show_progress(self, event) -> None:
        """Move the bar (a `QualityProgress`)."""
        self.progress.setValue(int(1000 * event.done / max(event.total, 1)))
        self.status_label.setText(
            f"Checking quality: {event.label} ({event.elapsed_s:.0f} s)"
        )

    def add_result(self, result) -> None:
        """Append one measured cell (a `CellResult`) to the table."""
        row = self.table.rowCount()
        self.table.insertRow(row)
        failing = result.error is None and result.verdict == FAILS
        for column, text in enumerate(_cells(result)):
            item = QTableWidgetItem(text)
            item.setToolTip(one_line(result))
            if column:
                item.setTextAlignment(
                    Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
                )
            if failing:
                item.setForeground(QColor(FAIL_COLOUR))
            self.table.setItem(row, column, item)

    def show_finished(self, report) -> None:
        """Show the check's rows (all measured cells, also after a Stop) and its end."""
        self.set_running(False)
        self.table.setRowCount(0)
        for result in report.results:
            self.add_result(result)
        kind = "stopped" if report.cancelled else "done"
        hits, total = report.reference_recall
        self.status_label.setText(
            f"Quality check {kind} in {report.seconds:.0f} s: {len(report.results)} "
            f"compressions measured and saved (full precision: pass keys {hits}/{total}"
            + (
                f", perplexity {report.reference_perplexity:.1f}"
                if report.reference_perplexity
                else ""
            )
            + ")."
        )

    def show_refusal(self, message: str) -> None:
        """Say why a check did not start (nothing else changes)."""
        self.status_label.setText(message)

    def show_failure(self, message: str) -> None:
        """Say why the check could not run or finish."""
        self.set_running(False)
        self.status_label.setText(message)

    def row_texts(self) -> list[list[str]]:
        """The table as text (tests and screenshots)."""
        return [
            [
                item.text() if (item := self.table.item(row, col)) is not None else ""
                for col in range(self.table.columnCount())
            ]
            for row in range(self.table.rowCount())
        ]
