"""The model manager: local models with their size and whether they fit, downloads, the demo.

Models come from `model_catalog.find_models` (the window scans, off the UI thread), with
the loaded model always among them (the demo too) and marked; for each one the doctor's
verdict for this machine (fits or not, usable context at 16/8/4 bits: what memory
allows, capped by the context the model was trained for, and saying which) is worked
out on a pool thread and filled in as it arrives, before anything is loaded. A Hugging
Face repo id can be downloaded into ``SWAPLESS_HOME/models`` with progress and cancel
(`model_download`); without internet it says so in words. The `QualityPanelView`
checks what compression costs on the loaded model. The dialog is kept for the
window's lifetime, so a download (or a quality check) goes on while it is hidden.
"""

from __future__ import annotations

import html
import logging
import threading
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import KnownError
from app.core.models.model_catalog import (
    REFERENCE_EXPLANATION,
    SOURCE_FOLDER,
    LocalModel,
    ModelVerdict,
)
from app.core.models.model_verdict_text import verdict_details
from app.core.text.display_numbers import format_bytes
from app.ui.common.background import TaskSet
from app.ui.common.theme import error_colour
from app.ui.models.quality_panel_view import QualityPanelView
from app.ui.models.welcome_view import DEMO_EXPLANATION

log = logging.getLogger(__name__)

COLUMNS = ("Model", "Source", "Size", "On this machine")
PATH_ROLE = Qt.ItemDataRole.UserRole


class ModelManagerDialog(QDialog):
    """Local models, their verdicts, downloads and the demo model."""

    load_requested = Signal(str)
    demo_requested = Signal()
    folders_changed = Signal(list)
    catalog_changed = Signal()
    download_finished = Signal(str)
    download_failed = Signal(str)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.resize(900, 720)
        self.tasks = TaskSet(self)
        self.hub_endpoint: str | None = None
        self._settings = None
        self._snapshot = None
        self._models: list[LocalModel] = []
        self._verdicts: dict[str, ModelVerdict] = {}
        self._pending: set[str] = set()
        self._download_cancel: threading.Event | None = None

        layout = QVBoxLayout(self)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("modelTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._on_table_item_selection_changed)
        self.table.itemDoubleClicked.connect(
            lambda _item: self._on_load_button_clicked()
        )
        layout.addWidget(self.table, 3)
        self.empty_label = QLabel(
            "No local models found yet. Download one below, add a folder, or try the "
            "demo model."
        )
        self.empty_label.setWordWrap(True)
        layout.addWidget(self.empty_label)
        self.details = QTextBrowser()
        self.details.setObjectName("modelDetails")
        self.details.setMaximumHeight(130)
        layout.addWidget(self.details, 1)
        self.quality_panel = QualityPanelView()
        layout.addWidget(self.quality_panel)

        row = QHBoxLayout()
        self.load_button = QPushButton("Load")
        self.load_button.setDefault(True)
        self.load_button.clicked.connect(self._on_load_button_clicked)
        row.addWidget(self.load_button)
        self.add_folder_button = QPushButton("Add folder…")
        self.add_folder_button.setToolTip(
            "A model folder, or a folder holding model folders"
        )
        self.add_folder_button.clicked.connect(self._on_add_folder_button_clicked)
        row.addWidget(self.add_folder_button)
        self.remove_folder_button = QPushButton("Remove folder")
        self.remove_folder_button.clicked.connect(self._on_remove_folder_button_clicked)
        row.addWidget(self.remove_folder_button)
        self.rescan_button = QPushButton("Rescan")
        self.rescan_button.clicked.connect(self.catalog_changed)
        row.addWidget(self.rescan_button)
        row.addStretch(1)
        layout.addLayout(row)

        download = QGroupBox("Download from Hugging Face")
        download_layout = QVBoxLayout(download)
        line = QHBoxLayout()
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText(
            "org/name, e.g. mlx-community/Qwen2.5-0.5B-Instruct-4bit"
        )
        self.repo_edit.returnPressed.connect(self._on_download_button_clicked)
        line.addWidget(self.repo_edit, 1)
        self.download_button = QPushButton("Download")
        self.download_button.clicked.connect(self._on_download_button_clicked)
        line.addWidget(self.download_button)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel_download)
        line.addWidget(self.cancel_button)
        download_layout.addLayout(line)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.hide()
        download_layout.addWidget(self.progress)
        self.download_status = QLabel()
        self.download_status.setObjectName("downloadStatus")
        self.download_status.setTextFormat(Qt.TextFormat.PlainText)
        self.download_status.setWordWrap(True)
        self.download_status.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        download_layout.addWidget(self.download_status)
        layout.addWidget(download)

        demo = QGroupBox("Demo model")
        demo_layout = QHBoxLayout(demo)
        demo_text = QLabel(DEMO_EXPLANATION)
        demo_text.setWordWrap(True)
        demo_layout.addWidget(demo_text, 1)
        self.demo_button = QPushButton("Build and load the demo model")
        self.demo_button.clicked.connect(self._on_demo_button_clicked)
        demo_layout.addWidget(self.demo_button, 0, Qt.AlignmentFlag.AlignTop)
        layout.addWidget(demo)
        close = QHBoxLayout()
        close.addStretch(1)
        close_button = QPushButton("Close")
        close_button.clicked.connect(self.hide)
        close.addWidget(close_button)
        layout.addLayout(close)
        self._update_buttons()

    # -- data --------------------------------------------------------------------------

    def set_context(self, settings, snapshot) -> None:
        """The settings (budget, added folders) and a memory snapshot for the verdicts."""
        budget_changed = (
            self._settings is None or settings.budget() != self._settings.budget()
        )
        self._settings = settings
        if snapshot is not None:
            self._snapshot = snapshot
        if budget_changed:
            self._verdicts.clear()

    def set_models(self, models: list[LocalModel], loaded: str | None = None) -> None:
        """Show ``models`` and work out the verdicts not known yet.

        Args:
            models: The models to list.
            loaded: The folder of the loaded model: marked, and selected when nothing
                else is.
        """
        selected = self.selected_model()
        self._models = list(models)
        self.table.setRowCount(len(models))
        for row, model in enumerate(models):
            marks = ("  (demo)" if model.is_demo else "") + (
                "  · tiny, answers offline" if model.is_reference else ""
            )
            marks += (
                "  · loaded" if loaded is not None and str(model.path) == loaded else ""
            )
            name = QTableWidgetItem(model.name + marks)
            name.setData(PATH_ROLE, str(model.path))
            tip = str(model.path)
            if model.is_reference:
                tip = f"{REFERENCE_EXPLANATION}\n{tip}"
            name.setToolTip(tip)
            self.table.setItem(row, 0, name)
            self.table.setItem(row, 1, QTableWidgetItem(model.source_label))
            size = QTableWidgetItem(format_bytes(model.size_bytes))
            size.setTextAlignment(
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter
            )
            self.table.setItem(row, 2, size)
            self.table.setItem(row, 3, QTableWidgetItem(self._verdict_text(model)))
            if selected is not None and model.path == selected.path:
                self.table.selectRow(row)
        if selected is None and loaded is not None:
            self.select_path(loaded)
        self.empty_label.setVisible(not models)
        for model in models:
            self._assess(model)
        self._update_buttons()
        self._show_details()

    def verdict(self, path: str | Path) -> ModelVerdict | None:
        """The verdict of a listed model, once known."""
        return self._verdicts.get(str(path))

    def selected_model(self) -> LocalModel | None:
        """The highlighted model."""
        rows = (
            self.table.selectionModel().selectedRows()
            if self.table.selectionModel()
            else []
        )
        if not rows:
            return None
        item = self.table.item(rows[0].row(), 0)
        assert item is not None, "every row has its first cell"
        path = item.data(PATH_ROLE)
        return next((m for m in self._models if str(m.path) == path), None)

    def select_path(self, path: str | Path) -> None:
        """Highlight the model at ``path``."""
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.data(PATH_ROLE) == str(path):
                self.table.selectRow(row)
                return

    def _verdict_text(self, model: LocalModel) -> str:
        verdict = self._verdicts.get(str(model.path))
        if verdict is None:
            return "checking…"
        return verdict.summary if verdict.fits else f"✗ {verdict.summary}"

    def _assess(self, model: LocalModel) -> None:
        key = str(model.path)
        if key in self._verdicts or key in self._pending or self._settings is None:
            return
        from app.core.memory.probe import MemoryProbe
        from app.core.models.model_catalog import assess

        self._pending.add(key)
        budget = self._settings.budget()
        snapshot = self._snapshot

        def work(_report):
            return assess(model.path, budget, snapshot or MemoryProbe().sample())

        self.tasks.start(
            work,
            on_finished=lambda verdict: self._on_verdict(key, verdict),
            on_failed=lambda exc: self._on_verdict_failed(key, exc),
        )

    def _on_verdict_failed(self, key: str, exc: Exception) -> None:
        log.warning("checking %s failed", key, exc_info=exc)
        self._on_verdict(
            key, ModelVerdict(False, f"Cannot be checked: {exc}", None, {}, None)
        )

    def _on_verdict(self, key: str, verdict: ModelVerdict) -> None:
        self._pending.discard(key)
        self._verdicts[key] = verdict
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.data(PATH_ROLE) == key:
                cell = QTableWidgetItem(
                    verdict.summary if verdict.fits else f"✗ {verdict.summary}"
                )
                cell.setToolTip(verdict.summary)
                self.table.setItem(row, 3, cell)
        self._update_buttons()
        self._show_details()

    # -- buttons -----------------------------------------------------------------------

    def _update_buttons(self) -> None:
        model = self.selected_model()
        verdict = self._verdicts.get(str(model.path)) if model else None
        fits = verdict is None or verdict.fits or verdict.report is None
        self.load_button.setEnabled(model is not None and fits)
        self.load_button.setToolTip(
            "" if fits else "Its weights alone do not fit this machine's memory budget."
        )
        self.remove_folder_button.setEnabled(
            model is not None and model.source == SOURCE_FOLDER
        )

    def _show_details(self) -> None:
        model = self.selected_model()
        if model is None:
            self.details.setHtml(
                "<p>Select a model to see what it needs. Verdicts come from its "
                "config.json and weight headers: nothing is loaded to find out.</p>"
            )
            return
        details = verdict_details(model, self._verdicts.get(str(model.path)))
        if model.is_reference:
            details = f"<p>{html.escape(REFERENCE_EXPLANATION)}</p>{details}"
        self.details.setHtml(details)

    def _on_table_item_selection_changed(self) -> None:
        self._update_buttons()
        self._show_details()

    def _on_load_button_clicked(self) -> None:
        model = self.selected_model()
        if model is None or not self.load_button.isEnabled():
            return
        if model.is_demo:
            self.demo_requested.emit()
        else:
            self.load_requested.emit(str(model.path))
        self.hide()

    def _on_demo_button_clicked(self) -> None:
        self.demo_requested.emit()
        self.hide()

    def _on_add_folder_button_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if folder:
            self.add_folder(folder)

    def add_folder(self, folder: str) -> None:
        """Search ``folder`` for models from now on."""
        folders = list(self._settings.model_folders) if self._settings else []
        if folder not in folders:
            folders.append(folder)
        self.folders_changed.emit(folders)

    def _on_remove_folder_button_clicked(self) -> None:
        model = self.selected_model()
        if model is None or self._settings is None:
            return
        folders = [
            f
            for f in self._settings.model_folders
            if not (
                model.path == Path(f).expanduser()
                or Path(f).expanduser() in model.path.parents
            )
        ]
        self.folders_changed.emit(folders)

    # -- downloads ---------------------------------------------------------------------

    @property
    def downloading(self) -> bool:
        """True while a download runs."""
        return self._download_cancel is not None

    def start_download(self, repo_text: str) -> None:
        """Download a repo (the text of the repo field)."""
        from app.core.models.model_download import check_repo_id, download_model

        if self.downloading:
            return
        try:
            repo = check_repo_id(repo_text)
        except KnownError as exc:
            self._download_error(str(exc))
            return
        cancel = threading.Event()
        self._download_cancel = cancel
        endpoint = self.hub_endpoint
        self.download_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self.progress.setValue(0)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.download_status.setStyleSheet("")
        self.download_status.setText(f"Connecting to the Hugging Face hub for {repo}…")
        self.tasks.start(
            lambda report: download_model(
                repo, on_progress=report, cancel=cancel, endpoint=endpoint
            ),
            on_finished=self._on_download_done,
            on_failed=self._on_download_error,
            on_progress=self._on_download_progress,
        )

    def cancel_download(self) -> None:
        """Stop the running download at its next chunk."""
        if self._download_cancel is not None:
            self._download_cancel.set()
            self.download_status.setText("Cancelling…")

    def _on_download_button_clicked(self) -> None:
        self.start_download(self.repo_edit.text())

    def _on_download_progress(self, progress) -> None:
        fraction = progress.fraction
        if fraction is None:
            return
        self.progress.setRange(0, 1000)
        self.progress.setValue(int(fraction * 1000))
        if progress.total_bytes:
            self.download_status.setText(
                f"Downloading: {format_bytes(progress.downloaded_bytes)} of "
                f"{format_bytes(progress.total_bytes)}"
                + (
                    f" ({progress.files_done}/{progress.files_total} files)"
                    if progress.files_total
                    else ""
                )
            )

    def _on_download_done(self, folder) -> None:
        self._end_download()
        self.progress.setRange(0, 1000)
        self.progress.setValue(1000)
        self.download_status.setText(
            f"Downloaded to {folder}. Select it above and press Load."
        )
        self.catalog_changed.emit()
        self.download_finished.emit(str(folder))

    def _on_download_error(self, exc: Exception) -> None:
        from app.core.models.model_download import DownloadCancelled

        self._end_download()
        self.progress.hide()
        if isinstance(exc, DownloadCancelled):
            self.download_status.setStyleSheet("")
            self.download_status.setText(
                "Download cancelled. What was fetched is kept; downloading again resumes it."
            )
            self.download_failed.emit(str(exc))
            return
        if not isinstance(exc, KnownError):
            log.error("download failed", exc_info=exc)
        message = (
            str(exc)
            if isinstance(exc, KnownError)
            else (f"The download failed: {type(exc).__name__}: {exc}")
        )
        self._download_error(message)

    def _download_error(self, message: str) -> None:
        self.download_status.setStyleSheet(f"color: {error_colour()};")
        self.download_status.setText(message)
        self.download_failed.emit(message)

    def _end_download(self) -> None:
        self._download_cancel = None
        self.download_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
