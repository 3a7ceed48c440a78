"""The main window: conversations on the left, the chat in the centre, memory at the bottom.

The window is the controller between the views and the core. It reads the store
directly (listing, searching, showing messages: quick, thread-safe calls) and sends
everything that touches the model to the `GenerationWorker` on its QThread; the memory
gauge is fed by the `MemorySampler` on another. Slots are named
``_on_<sender>_<signal>``.

Life cycle: the constructor starts both threads; closing the window stops a reply in
progress (the core saves the partial reply as interrupted), stops the threads, commits
pending deletes and closes the store, within about two seconds.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QMetaObject,
    Qt,
    QThread,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from app.core import paths
from app.core.errors import KnownError, SettingsError
from app.core.presets import Preset, all_presets, get_preset, preset_from_dict
from app.core.settings import AppSettings, save_settings
from app.core.text.display_numbers import format_bytes
from app.ui import window_state
from app.ui.background import TaskSet
from app.ui.banner_view import BannerAreaView
from app.ui.chat_view import ChatView
from app.ui.composer_view import ComposerView
from app.ui.context_meter_view import ContextMeterView
from app.ui.conversation_list_view import UNTITLED, ConversationListView
from app.ui.dialogs import confirm, show_error, show_failure
from app.ui.generation_worker import GenerationWorker
from app.ui.memory_gauge_view import MemoryGaugeView
from app.ui.memory_sampler import MemorySampler
from app.ui.theme import apply_theme, markdown_theme
from app.ui.welcome_view import WelcomeView

log = logging.getLogger(__name__)

UNDO_DELETE_MS = 6000
SHUTDOWN_WAIT_MS = 1500
DEMO_ITEM = "demo"
MANAGE_ITEM = "manage"
NO_MODEL_REASON = (
    "No model is loaded. Choose one in the model picker above, open Models… to "
    "download or add one, or try the demo model."
)
DEMO_BANNER = (
    "Demo model: tiny, with random weights, so its replies are noise. For real answers "
    "open Models… and download an MLX model (e.g. mlx-community/Qwen2.5-0.5B-"
    "Instruct-4bit) or add a folder with one."
)
PRESSURE_BANNERS = {
    "warning": (
        "Memory is getting tight ({source}). Before the next reply Swapless frees the "
        "cached prompts it can rebuild, and it trims conversations earlier (at 75% of "
        "their limit) so the KV cache stops growing. Closing other apps helps."
    ),
    "critical": (
        "Memory pressure is critical ({source}). Swapless will not start reading a new "
        "prompt until it eases: it frees what it can rebuild and summarises older turns "
        "of the conversation you send to. Close other apps or wait a moment, then send "
        "again."
    ),
}
# Threads a shutdown could not stop (a model still loading): kept referenced so Qt does
# not destroy a running QThread; the process exits around them.
_STUCK_THREADS: list[QThread] = []


def dispose_window(window: QMainWindow) -> None:
    """Close a window and delete it now, on this (the UI) thread.

    ``deleteLater`` alone waits for a running event loop, which scripts and tests do not
    have; a window left to Python's garbage collector could then be destroyed on
    whatever thread happens to collect it (e.g. the engine's), which crashes Qt.
    """
    window.close()
    window.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


class MainWindow(QMainWindow):
    """The Swapless window.

    Args:
        store: The open store; the window closes it when it shuts down.
        settings: App settings (defaults when None).
        engine: Only for tests: an engine to use instead of a new real one.
        restore_state: Restore geometry and the last conversation from the last run.
        load_last_model: Load the model of the last run, if it still exists.
    """

    # Emitted on the UI thread once the window has shown the outcome (the worker's own
    # signals come from its thread; tests and tools wait on these).
    model_loaded = Signal(object)
    model_load_failed = Signal(object)
    reply_chunk_received = Signal(int, str)
    reply_finished = Signal(int, object)
    reply_failed = Signal(int, object)
    trim_happened = Signal(int, object)
    preset_applied = Signal(int, object)
    context_measured = Signal(object)
    document_progressed = Signal(int, object)
    document_finished = Signal(int, object)
    shut_down = Signal()

    def __init__(
        self,
        store,
        settings: AppSettings | None = None,
        *,
        engine=None,
        restore_state: bool = True,
        load_last_model: bool = True,
    ):
        super().__init__()
        self.setWindowTitle("Swapless")
        self.resize(1200, 800)
        icon = paths.resources_dir() / "icon.svg"
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.store = store
        self.settings = settings or AppSettings()
        self.tasks = TaskSet(self)
        self._model_info = None
        self._loading = False
        self._current_id: int | None = None
        self._new_chat_preset: Preset = self._default_preset()
        self._current_preset: Preset = self._new_chat_preset
        self._busy_id: int | None = None
        self._busy_new_chat = False
        self._live_text = ""
        self._last_request: tuple[str, str] = ("", "")
        self._pending_deletes: set[int] = set()
        self._pressure = "normal"
        self._models: list = []
        self._filling_combos = False
        self._model_manager = None
        self._is_shut_down = False

        self._build_threads(engine)
        self._build_ui()
        self._build_actions()
        self._connect()
        self.chat_view.set_theme(markdown_theme(self.palette()))
        self.memory_gauge.set_cap_fraction(self.settings.memory_cap_fraction)

        self._refresh_conversation_list()
        self._fill_presets()
        restored = None
        if restore_state:
            geometry, splitter, restored = window_state.load_window_state()
            if geometry is not None:
                self.restoreGeometry(geometry)
            if splitter is not None:
                self.splitter.restoreState(splitter)
        if restored is not None and restored in self.list_view.conversation_ids():
            self.open_conversation(restored)
        else:
            self.new_chat()
        self._notify_store_recovery()
        self._fill_models()
        self.refresh_models()
        last = self.settings.last_model
        if load_last_model and last and Path(last).is_dir():
            self.load_model(last)
        self._refresh_state()

    # -- construction ------------------------------------------------------------------

    def _build_threads(self, engine) -> None:
        self.worker = GenerationWorker(self.store, engine, self.settings)
        self._worker_thread = QThread()
        self._worker_thread.setObjectName("swapless-generation")
        self.worker.moveToThread(self._worker_thread)
        mlx_stats = getattr(self.worker.engine, "mlx_memory", None)
        kv_bytes = getattr(self.worker.engine, "live_kv_bytes", None)
        self.sampler = MemorySampler(kv_bytes=kv_bytes, mlx_stats=mlx_stats)
        self._sampler_thread = QThread()
        self._sampler_thread.setObjectName("swapless-memory")
        self.sampler.moveToThread(self._sampler_thread)
        self._sampler_thread.started.connect(self.sampler.start)
        self.worker.pressure = self.sampler.pressure_level
        self._worker_thread.start()
        self._sampler_thread.start()

    def _build_ui(self) -> None:
        toolbar = QToolBar("Model and preset")
        toolbar.setObjectName("mainToolbar")
        toolbar.setMovable(False)
        toolbar.setFloatable(False)
        toolbar.setContextMenuPolicy(Qt.ContextMenuPolicy.PreventContextMenu)
        self.addToolBar(toolbar)
        toolbar.addWidget(QLabel(" Model "))
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("modelPicker")
        self.model_combo.setMinimumContentsLength(28)
        self.model_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model_combo.setToolTip("The model that writes the replies")
        toolbar.addWidget(self.model_combo)
        self.models_button = QPushButton("Models…")
        self.models_button.setToolTip(
            "Model manager: local models, downloads, what fits"
        )
        toolbar.addWidget(self.models_button)
        self.loading_bar = QProgressBar()
        self.loading_bar.setRange(0, 0)
        self.loading_bar.setMaximumWidth(90)
        self.loading_bar.setMaximumHeight(12)
        self.loading_bar.setTextVisible(False)
        self.loading_action = toolbar.addWidget(self.loading_bar)
        self.loading_action.setVisible(False)
        self.loading_label = QLabel()
        self.loading_label_action = toolbar.addWidget(self.loading_label)
        self.loading_label_action.setVisible(False)
        toolbar.addSeparator()
        toolbar.addWidget(QLabel(" Preset "))
        self.preset_combo = QComboBox()
        self.preset_combo.setObjectName("presetPicker")
        self.preset_combo.setMinimumContentsLength(14)
        toolbar.addWidget(self.preset_combo)
        self.preset_button = QPushButton("Edit preset…")
        toolbar.addWidget(self.preset_button)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        toolbar.addWidget(spacer)
        self.settings_button = QPushButton("Settings")
        self.settings_button.setToolTip("Settings (Ctrl+,)")
        toolbar.addWidget(self.settings_button)

        self.list_view = ConversationListView()
        self.banners = BannerAreaView()
        self.chat_view = ChatView()
        self.welcome_view = WelcomeView()
        self.composer = ComposerView()
        self.main_stack = QStackedWidget()
        self.main_stack.addWidget(self.welcome_view)
        self.main_stack.addWidget(self.chat_view)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.setSpacing(0)
        centre_layout.addWidget(self.banners)
        centre_layout.addWidget(self.main_stack, 1)
        centre_layout.addWidget(self.composer)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("mainSplitter")
        self.splitter.addWidget(self.list_view)
        self.splitter.addWidget(centre)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([260, 940])
        self.splitter.setChildrenCollapsible(False)

        self.memory_gauge = MemoryGaugeView()
        self.context_meter = ContextMeterView()
        status = QFrame()
        status.setObjectName("statusArea")
        status.setFrameShape(QFrame.Shape.StyledPanel)
        status_layout = QHBoxLayout(status)
        status_layout.setContentsMargins(10, 5, 10, 5)
        status_layout.setSpacing(14)
        status_layout.addWidget(self.memory_gauge, 3)
        divider = QFrame()
        divider.setFrameShape(QFrame.Shape.VLine)
        divider.setFrameShadow(QFrame.Shadow.Sunken)
        status_layout.addWidget(divider)
        status_layout.addWidget(self.context_meter, 2)

        root = QWidget()
        root_layout = QVBoxLayout(root)
        root_layout.setContentsMargins(0, 0, 0, 0)
        root_layout.setSpacing(0)
        root_layout.addWidget(self.splitter, 1)
        root_layout.addWidget(status)
        self.setCentralWidget(root)

    def _build_actions(self) -> None:
        self.new_chat_action = self._action(
            "New chat", QKeySequence.StandardKey.New, self.new_chat
        )
        self.search_action = self._action(
            "Search", QKeySequence.StandardKey.Find, self.list_view.focus_search
        )
        self.stop_action = self._action(
            "Stop", QKeySequence(Qt.Key.Key_Escape), self.stop_generation
        )
        self.settings_action = self._action(
            "Settings", QKeySequence("Ctrl+,"), self.open_settings
        )

    def _action(self, text: str, shortcut, slot) -> QAction:
        action = QAction(text, self)
        action.setShortcut(shortcut)
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _connect(self) -> None:
        worker = self.worker
        worker.model_loading_started.connect(self._on_worker_model_loading_started)
        worker.model_loaded.connect(self._on_worker_model_loaded)
        worker.model_load_failed.connect(self._on_worker_model_load_failed)
        worker.conversation_started.connect(self._on_worker_conversation_started)
        worker.chunk_received.connect(self._on_worker_chunk_received)
        worker.prefill_progressed.connect(self._on_worker_prefill_progressed)
        worker.trim_happened.connect(self._on_worker_trim_happened)
        worker.generation_finished.connect(self._on_worker_generation_finished)
        worker.generation_failed.connect(self._on_worker_generation_failed)
        worker.preset_applied.connect(self._on_worker_preset_applied)
        worker.preset_failed.connect(self._on_worker_preset_failed)
        worker.context_measured.connect(self._on_worker_context_measured)
        worker.document_started.connect(self._on_worker_document_started)
        worker.document_progressed.connect(self._on_worker_document_progressed)
        worker.document_finished.connect(self._on_worker_document_finished)
        self.sampler.snapshot_taken.connect(self._on_sampler_snapshot_taken)

        self.list_view.conversation_selected.connect(
            self._on_list_view_conversation_selected
        )
        self.list_view.new_requested.connect(self.new_chat)
        self.list_view.rename_submitted.connect(self._on_list_view_rename_submitted)
        self.list_view.delete_requested.connect(self.delete_conversation)
        self.list_view.search_changed.connect(self._on_list_view_search_changed)
        self.list_view.search_hit_activated.connect(
            self._on_list_view_search_hit_activated
        )
        self.composer.send_requested.connect(self.send_message)
        self.composer.stop_requested.connect(self.stop_generation)
        self.composer.attach_requested.connect(self.choose_document)
        self.chat_view.edit_submitted.connect(self.edit_and_resend)
        self.chat_view.regenerate_requested.connect(self.regenerate_last_reply)
        self.welcome_view.models_requested.connect(self.open_model_manager)
        self.welcome_view.demo_requested.connect(self.load_demo_model)
        self.model_combo.activated.connect(self._on_model_combo_activated)
        self.models_button.clicked.connect(self.open_model_manager)
        self.preset_combo.activated.connect(self._on_preset_combo_activated)
        self.preset_button.clicked.connect(self.open_preset_editor)
        self.settings_button.clicked.connect(self.open_settings)

    # -- public actions ----------------------------------------------------------------

    @property
    def current_conversation_id(self) -> int | None:
        """The conversation shown, or None for a new chat not sent yet."""
        return self._current_id

    @property
    def current_preset(self) -> Preset:
        """The preset the next turn of the shown conversation uses."""
        return self._current_preset

    @property
    def busy(self) -> bool:
        """True while a reply is being written."""
        return self._busy_id is not None or self._busy_new_chat

    @property
    def model_info(self):
        """The loaded model, or None."""
        return self._model_info

    def load_model(self, folder: str) -> None:
        """Load a model folder on the worker (the window stays responsive)."""
        if self._is_shut_down:
            return
        if self.busy:
            self.banners.show_banner(
                "model",
                "warning",
                "Stop the reply first, then change the model.",
                timeout_ms=5000,
            )
            return
        self.worker.load_model(str(folder))

    def load_demo_model(self) -> None:
        """Build (first time) and load the demo model."""
        if not self.busy and not self._is_shut_down:
            self.worker.load_demo_model()

    def new_chat(self) -> None:
        """Show an empty chat; it is stored when its first message is sent."""
        self._current_id = None
        self._new_chat_preset = self._default_preset()
        self._current_preset = self._new_chat_preset
        self.list_view.select(None)
        self.chat_view.clear()
        self._select_preset(self._current_preset)
        self.context_meter.set_state(None)
        self.worker.measure_context(None, self._current_preset)
        self.setWindowTitle("Swapless")
        self._refresh_state()
        self.composer.focus()

    def open_conversation(
        self, conversation_id: int, reveal_message: int | None = None
    ) -> None:
        """Show a stored conversation (and scroll to one of its messages)."""
        try:
            conversation = self.store.get_conversation(conversation_id)
        except KnownError as exc:
            show_error(self, "Cannot open the conversation", str(exc))
            self._refresh_conversation_list()
            return
        changed = conversation_id != self._current_id
        self._current_id = conversation_id
        self._current_preset = self._conversation_preset(conversation)
        self._select_preset(self._current_preset)
        self.list_view.select(conversation_id)
        self._show_current(keep_live=False)
        if changed:
            self.context_meter.set_state(None)
        self.worker.measure_context(conversation_id, None)
        self.setWindowTitle(f"{conversation.title or UNTITLED} — Swapless")
        self._refresh_state()
        if reveal_message is not None:
            self.chat_view.reveal_message(reveal_message)
        else:
            self.chat_view.scroll_to_bottom()

    def send_message(self, text: str) -> None:
        """Send ``text`` in the shown conversation (a new one for a new chat)."""
        if self._is_shut_down or self.busy or self._model_info is None or self._loading:
            return
        self._last_request = ("send", text)
        self._live_text = ""
        if self._current_id is None:
            self._busy_new_chat = True
        else:
            self._busy_id = self._current_id
        self._show_main()
        self.chat_view.start_live_turn(text)
        self.worker.send(self._current_id, text, self._current_preset)
        self._refresh_state()

    def choose_document(self) -> None:
        """Ask for a text file to read (non-blocking file dialog)."""
        dialog = QFileDialog(self, "Read a document")
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.setNameFilters(
            [
                "Text and Markdown (*.txt *.md *.markdown *.rst *.log *.csv *.json "
                "*.py *.html *.xml *.tex)",
                "All files (*)",
            ]
        )
        dialog.fileSelected.connect(self.attach_document)
        dialog.open()
        self._file_dialog = dialog

    def attach_document(self, path: str) -> None:
        """Read a document of any length into the shown conversation and answer about it.

        What is typed in the composer is the question (empty: a summary). The
        conversation's preset is used when it reads in segments, else the built-in
        long-document preset.
        """
        from app.core.longdoc.prompts import DEFAULT_QUESTION, request_text

        if self._is_shut_down or self.busy or self._model_info is None or self._loading:
            return
        if not path:
            return
        question = self.composer.take_text()
        preset = self._current_preset
        if not preset.segmenting:
            preset = get_preset("long-document")
        self._last_request = ("document", question)
        self._live_text = ""
        if self._current_id is None:
            self._busy_new_chat = True
        else:
            self._busy_id = self._current_id
        self._show_main()
        self.chat_view.start_live_turn(
            request_text(Path(path).name, question or DEFAULT_QUESTION)
        )
        self.chat_view.set_live_footer("Reading the document…")
        self.worker.read_document(self._current_id, path, question, preset)
        self._refresh_state()

    def regenerate_last_reply(self) -> None:
        """Write the last reply of the shown conversation again."""
        if self._is_shut_down or self.busy or self._current_id is None:
            return
        if self._model_info is None:
            return
        self._last_request = ("regenerate", "")
        self._live_text = ""
        self._busy_id = self._current_id
        self.chat_view.remove_last_reply()
        self.chat_view.start_live_turn(None)
        self.worker.regenerate(self._current_id)
        self._refresh_state()

    def edit_and_resend(self, message_id: int, text: str) -> None:
        """Replace a user message (and what came after it) and send it again."""
        if self._is_shut_down or self.busy or self._current_id is None:
            return
        if self._model_info is None:
            return
        self._last_request = ("edit", text)
        self._live_text = ""
        self._busy_id = self._current_id
        self.chat_view.remove_from(message_id)
        self.chat_view.start_live_turn(text)
        self.worker.edit_and_resend(self._current_id, message_id, text)
        self._refresh_state()

    def stop_generation(self) -> None:
        """Stop the reply being written (it is kept, marked stopped)."""
        if self.busy:
            self.worker.cancel()
            self.chat_view.set_live_footer("Stopping…")

    def delete_conversation(self, conversation_id: int) -> None:
        """Ask, then delete a conversation (with a few seconds to undo)."""
        try:
            title = self.store.get_conversation(conversation_id).title or UNTITLED
        except KnownError:
            return
        self._delete_dialog = confirm(
            self,
            "Delete conversation",
            f"Delete “{title}” and all its messages?",
            "Delete",
            lambda: self.delete_with_undo(conversation_id),
        )

    def delete_with_undo(self, conversation_id: int) -> None:
        """Hide a conversation now and delete it after the undo period."""
        try:
            title = self.store.get_conversation(conversation_id).title or UNTITLED
        except KnownError:
            return
        if conversation_id == self._busy_id:
            self.worker.cancel()
        self._pending_deletes.add(conversation_id)
        if conversation_id == self._current_id:
            self.new_chat()
        self._refresh_conversation_list()
        self.banners.show_banner(
            f"delete-{conversation_id}",
            "info",
            f"Deleted “{title}”.",
            action=("Undo", lambda: self._undo_delete(conversation_id)),
            timeout_ms=UNDO_DELETE_MS,
            on_timeout=lambda: self._commit_delete(conversation_id),
        )

    def set_preset(self, preset: Preset) -> None:
        """Use ``preset`` for the shown conversation from its next turn on."""
        self._current_preset = preset
        self._select_preset(preset)
        if self._current_id is None:
            self._new_chat_preset = preset
            self.worker.measure_context(None, preset)
        else:
            self.worker.apply_preset(self._current_id, preset)

    def refresh_models(self) -> None:
        """Look for local models again (off the UI thread) and refill the picker."""
        from app.core.model_catalog import find_models

        folders = list(self.settings.model_folders)
        self.tasks.start(
            lambda _report: find_models(folders),
            on_finished=self._on_catalog_found,
            on_failed=lambda exc: log.warning("model search failed: %s", exc),
        )

    def apply_settings(self, settings: AppSettings) -> None:
        """Save and use new settings."""
        try:
            save_settings(settings)
        except SettingsError as exc:
            show_error(self, "Settings not saved", str(exc))
        theme_changed = settings.theme != self.settings.theme
        budget_changed = settings.budget() != self.settings.budget()
        folders_changed = settings.model_folders != self.settings.model_folders
        self.settings = settings
        if theme_changed:
            apply_theme(QApplication.instance(), settings.theme)
        self.worker.apply_settings(settings)
        if budget_changed:
            self.memory_gauge.set_cap_fraction(settings.memory_cap_fraction)
            self.worker.measure_context(self._current_id, self._current_preset)
        if folders_changed:
            self.refresh_models()
        if self._current_id is None:
            self._new_chat_preset = self._default_preset()

    # -- dialogs -----------------------------------------------------------------------

    def open_settings(self) -> None:
        """Open the settings dialog."""
        from app.ui.settings_dialog import SettingsDialog

        dialog = SettingsDialog(self.settings, list(all_presets()), self)
        dialog.settings_accepted.connect(self.apply_settings)
        dialog.open()
        self._settings_dialog = dialog

    def open_model_manager(self) -> None:
        """Open the model manager (one per window; downloads go on while it is hidden)."""
        from app.ui.model_manager_dialog import ModelManagerDialog

        if self._model_manager is None:
            self._model_manager = ModelManagerDialog(self)
            self._model_manager.load_requested.connect(self.load_model)
            self._model_manager.demo_requested.connect(self.load_demo_model)
            self._model_manager.folders_changed.connect(
                self._on_model_manager_folders_changed
            )
            self._model_manager.catalog_changed.connect(self.refresh_models)
        self._model_manager.set_context(self.settings, self.sampler.latest)
        self._model_manager.set_models(self._models)
        self._model_manager.show()
        self._model_manager.raise_()

    def open_preset_editor(self) -> None:
        """Edit the shown conversation's preset (or save a copy as a user preset)."""
        from app.ui.preset_editor_dialog import PresetEditorDialog

        dialog = PresetEditorDialog(self._current_preset, self)
        dialog.preset_applied.connect(self.set_preset)
        dialog.preset_saved.connect(lambda _preset: self._fill_presets())
        dialog.open()
        self._preset_dialog = dialog

    # -- worker signals ----------------------------------------------------------------

    def _on_worker_model_loading_started(self, folder: str) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._loading = True
        text = (
            "Building the demo model…" if folder == DEMO_ITEM else "Loading the model…"
        )
        self.loading_label.setText(text)
        self.welcome_view.set_loading(True, text if folder == DEMO_ITEM else "")
        self._refresh_state()

    def _on_worker_model_loaded(self, info) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._loading = False
        self._model_info = info
        self.memory_gauge.set_weights_bytes(info.weights_bytes)
        self.sampler.enable_mlx_stats()
        self.welcome_view.set_loading(False)
        if info.random_weights:
            self.banners.show_banner(
                "demo",
                "info",
                DEMO_BANNER,
                action=("Open models…", self.open_model_manager),
            )
        else:
            self.banners.hide_banner("demo")
        if self.settings.last_model != info.folder:
            try:
                self.settings = self.settings.with_changes(last_model=info.folder)
                save_settings(self.settings)
            except SettingsError as exc:
                log.warning("could not remember the model: %s", exc)
        self._fill_models()
        self.worker.measure_context(self._current_id, self._current_preset)
        self._refresh_state()
        self.model_loaded.emit(info)

    def _on_worker_model_load_failed(self, error) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._loading = False
        self._model_info = self.worker.model_info
        self.welcome_view.set_loading(False)
        if self._model_info is None:
            self.memory_gauge.set_weights_bytes(0)
            self.context_meter.set_state(None)
        self._fill_models()
        self._refresh_state()
        self._load_error_dialog = show_failure(self, "Could not load the model", error)
        self.model_load_failed.emit(error)

    def _on_worker_conversation_started(self, conversation_id: int) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._busy_new_chat = False
        self._busy_id = conversation_id
        if self._current_id is None:
            self._current_id = conversation_id
        self._refresh_conversation_list()

    def _on_worker_chunk_received(self, conversation_id: int, text: str) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._live_text += text
        if conversation_id == self._current_id:
            self.chat_view.append_live_text(text)
            self.context_meter.add_streamed_tokens(1)
        self.reply_chunk_received.emit(conversation_id, text)

    def _on_worker_prefill_progressed(
        self, conversation_id: int, done: int, total: int
    ) -> None:
        if conversation_id == self._current_id and total:
            self.chat_view.set_live_footer(
                f"Reading the prompt… {100 * done // total}%"
            )

    def _on_worker_trim_happened(self, conversation_id: int, outcome) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        if conversation_id == self._current_id:
            self._show_current(keep_live=True)
        noun = "message" if outcome.dropped_messages == 1 else "messages"
        note = f" ({outcome.note})" if outcome.note else ""
        self.banners.show_banner(
            "trim",
            "info",
            f"Summarised {outcome.dropped_messages} earlier {noun} "
            f"({outcome.summary_method}, {outcome.summary_tokens} tokens) to keep the "
            f"context within its limit; cache {outcome.cache_method} in "
            f"{outcome.cache_ms:.0f} ms{note}.",
            timeout_ms=8000,
        )
        self.trim_happened.emit(conversation_id, outcome)

    def _on_worker_generation_finished(self, conversation_id: int, report) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._end_turn()
        if conversation_id == self._current_id:
            self._show_current(keep_live=False)
            self.chat_view.scroll_to_bottom()
        self._refresh_conversation_list()
        self._refresh_state()
        self.reply_finished.emit(conversation_id, report)

    def _on_worker_generation_failed(self, conversation_id: int, error) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        kind, text = self._last_request
        self._end_turn()
        if conversation_id == -1 or conversation_id == self._current_id:
            if self._current_id is None:
                self.chat_view.clear()
            else:
                self._show_current(keep_live=False)
            # A refused message was not stored: give it back rather than lose it.
            if (
                kind in ("send", "edit", "document")
                and not self._message_saved(conversation_id, text)
                and not self.composer.text().strip()
            ):
                self.composer.set_text(text)
        self._refresh_conversation_list()
        self._refresh_state()
        if error.known:
            self.banners.show_banner(
                "refused", "error", error.message, timeout_ms=20000
            )
        else:
            self._turn_error_dialog = show_failure(self, "The reply failed", error)
        self.reply_failed.emit(conversation_id, error)

    def _on_worker_document_started(self, conversation_id: int, event) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        if conversation_id != self._current_id:
            return
        if event.resumed_from:
            how = f"resuming at segment {event.resumed_from + 1} of {event.segments}"
        elif event.mode == "segments":
            how = f"{event.segments} segments"
        else:
            how = "read whole"
        self.chat_view.set_live_footer(
            f"{event.document_tokens:,} tokens, {how}; KV at most "
            f"{format_bytes(event.kv_bytes_limit)}"
        )
        self.banners.show_banner(
            "document", "info", event.mode_reason, timeout_ms=15000
        )

    def _on_worker_document_progressed(self, conversation_id: int, event) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        if conversation_id == self._current_id:
            if hasattr(event, "notes_tokens"):
                text = (
                    f"Read segment {event.index + 1} of {event.segments}: "
                    f"{event.tokens_per_s:.1f} tok/s, KV {format_bytes(event.kv_bytes)}"
                )
            else:
                text = (
                    f"Reading segment {event.index + 1} of {event.segments} "
                    f"({event.tokens:,} tokens)…"
                )
            self.chat_view.set_live_footer(text)
        self.document_progressed.emit(conversation_id, event)

    def _on_worker_document_finished(self, conversation_id: int, event) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self._end_turn()
        if conversation_id == self._current_id:
            self._show_current(keep_live=False)
            self.chat_view.scroll_to_bottom()
        if event.cancelled:
            self.banners.show_banner(
                "document",
                "info",
                f"Stopped with {event.next_segment} of {event.segments} segment(s) "
                "read; their notes are kept. Attach the same file with the same "
                "question to continue where it stopped.",
                timeout_ms=20000,
            )
        else:
            self.banners.hide_banner("document")
        self._refresh_conversation_list()
        self._refresh_state()
        self.document_finished.emit(conversation_id, event)

    def _on_worker_preset_applied(self, conversation_id: int, preset) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        if conversation_id == self._current_id:
            self._current_preset = preset
            self._select_preset(preset)
        self.preset_applied.emit(conversation_id, preset)

    def _on_worker_preset_failed(self, conversation_id: int, error) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        show_failure(self, "Could not change the preset", error)
        if conversation_id == self._current_id:
            self.open_conversation(conversation_id)

    def _on_worker_context_measured(self, state) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        if state.conversation_id == self._current_id:
            self.context_meter.set_state(state)
        self.context_measured.emit(state)

    def _on_sampler_snapshot_taken(self, snapshot) -> None:
        if self._is_shut_down:
            return  # a result queued before the threads stopped
        self.memory_gauge.update_snapshot(snapshot)
        level = snapshot.pressure.value
        if level == self._pressure:
            return
        self._pressure = level
        if level == "normal":
            self.banners.hide_banner("pressure")
        else:
            text = PRESSURE_BANNERS[level].format(source=snapshot.pressure_source)
            self.banners.show_banner(
                "pressure", "error" if level == "critical" else "warning", text
            )

    # -- view signals ------------------------------------------------------------------

    def _on_list_view_conversation_selected(self, conversation_id: int) -> None:
        if conversation_id != self._current_id:
            self.open_conversation(conversation_id)

    def _on_list_view_rename_submitted(self, conversation_id: int, title: str) -> None:
        try:
            self.store.rename_conversation(conversation_id, title)
        except KnownError as exc:
            show_error(self, "Cannot rename", str(exc))
        if conversation_id == self._current_id:
            self.setWindowTitle(f"{title} — Swapless")

    def _on_list_view_search_changed(self, text: str) -> None:
        try:
            hits = [
                h
                for h in self.store.search(text, limit=50)
                if h.conversation_id not in self._pending_deletes
            ]
        except KnownError as exc:
            show_error(self, "Search failed", str(exc))
            return
        self.list_view.show_search_results(text, hits)

    def _on_list_view_search_hit_activated(
        self, conversation_id: int, message_id
    ) -> None:
        self.open_conversation(conversation_id, reveal_message=message_id)

    def _on_model_combo_activated(self, index: int) -> None:
        if self._filling_combos:
            return
        data = self.model_combo.itemData(index)
        if data == MANAGE_ITEM:
            self._fill_models()
            self.open_model_manager()
        elif data == DEMO_ITEM:
            self.load_demo_model()
        elif data and (self._model_info is None or data != self._model_info.folder):
            self.load_model(data)

    def _on_preset_combo_activated(self, index: int) -> None:
        if self._filling_combos:
            return
        name = self.preset_combo.itemData(index)
        if name == self._current_preset.name:
            return
        try:
            preset = get_preset(name)
        except SettingsError as exc:
            show_error(self, "Cannot use this preset", str(exc))
            self._select_preset(self._current_preset)
            return
        self.set_preset(preset)

    def _on_catalog_found(self, models) -> None:
        self._models = models
        self._fill_models()
        if self._model_manager is not None:
            self._model_manager.set_models(models)

    def _on_model_manager_folders_changed(self, folders: list) -> None:
        try:
            self.apply_settings(
                self.settings.with_changes(model_folders=tuple(folders))
            )
        except SettingsError as exc:
            show_error(self, "Folder not added", str(exc))

    # -- helpers -----------------------------------------------------------------------

    def _default_preset(self) -> Preset:
        try:
            return get_preset(self.settings.default_preset)
        except SettingsError:
            return get_preset("chat")

    def _conversation_preset(self, conversation) -> Preset:
        try:
            return preset_from_dict(
                conversation.preset or "chat", conversation.settings
            )
        except SettingsError:
            return self._default_preset()

    def _fill_presets(self) -> None:
        self._filling_combos = True
        try:
            self._presets = all_presets()
            self.preset_combo.clear()
            for name, preset in self._presets.items():
                self.preset_combo.addItem(name, name)
                self.preset_combo.setItemData(
                    self.preset_combo.count() - 1,
                    preset.description,
                    Qt.ItemDataRole.ToolTipRole,
                )
        finally:
            self._filling_combos = False
        self._select_preset(self._current_preset)

    def _select_preset(self, preset: Preset) -> None:
        self._filling_combos = True
        try:
            index = self.preset_combo.findData(preset.name)
            if index < 0:
                self.preset_combo.addItem(
                    f"{preset.name} (this conversation)", preset.name
                )
                index = self.preset_combo.count() - 1
            self.preset_combo.setCurrentIndex(index)
            changed = preset != self._presets.get(preset.name)
            self.preset_combo.setToolTip(
                preset.description
                + ("\n(changed for this conversation)" if changed else "")
            )
        finally:
            self._filling_combos = False

    def _fill_models(self) -> None:
        self._filling_combos = True
        try:
            self.model_combo.clear()
            loaded = self._model_info.folder if self._model_info else None
            if loaded is None:
                self.model_combo.addItem("No model loaded", None)
            seen = set()
            for model in self._models:
                if model.is_demo:
                    continue
                label = f"{model.name}  ·  {model.source_label}"
                self.model_combo.addItem(label, str(model.path))
                self.model_combo.setItemData(
                    self.model_combo.count() - 1,
                    str(model.path),
                    Qt.ItemDataRole.ToolTipRole,
                )
                seen.add(str(model.path))
            if loaded and loaded not in seen and not self._model_info.random_weights:
                self.model_combo.addItem(Path(loaded).name, loaded)
            self.model_combo.addItem("Demo model (random weights)", DEMO_ITEM)
            if loaded and self._model_info.random_weights and loaded not in seen:
                self.model_combo.setItemData(
                    self.model_combo.count() - 1, loaded, Qt.ItemDataRole.ToolTipRole
                )
            self.model_combo.insertSeparator(self.model_combo.count())
            self.model_combo.addItem("Manage models…", MANAGE_ITEM)
            if loaded is None:
                self.model_combo.setCurrentIndex(0)
            elif self._model_info.random_weights and loaded not in seen:
                self.model_combo.setCurrentIndex(self.model_combo.findData(DEMO_ITEM))
            else:
                self.model_combo.setCurrentIndex(
                    max(0, self.model_combo.findData(loaded))
                )
        finally:
            self._filling_combos = False

    def _refresh_conversation_list(self) -> None:
        try:
            conversations = [
                c
                for c in self.store.list_conversations()
                if c.id not in self._pending_deletes
            ]
        except KnownError as exc:
            show_error(self, "Cannot read conversations", str(exc))
            return
        self.list_view.set_conversations(conversations, self._current_id)

    def _show_current(self, keep_live: bool) -> None:
        if self._current_id is None:
            return
        try:
            messages = self.store.messages(self._current_id, include_trimmed=True)
            summaries = self.store.summaries(self._current_id)
        except KnownError as exc:
            show_error(self, "Cannot read the conversation", str(exc))
            return
        self.chat_view.show_conversation(messages, summaries, keep_live=keep_live)
        if not keep_live and self._current_id == self._busy_id:
            self.chat_view.start_live_turn(None, self._live_text)
        self._show_main()

    def _show_main(self) -> None:
        show_welcome = self._model_info is None and self._current_id is None
        self.main_stack.setCurrentWidget(
            self.welcome_view if show_welcome else self.chat_view
        )

    def _message_saved(self, conversation_id: int, text: str) -> bool:
        if conversation_id is None or conversation_id < 0:
            return False
        try:
            messages = self.store.messages(conversation_id)
        except KnownError:
            return False
        return (
            bool(messages)
            and messages[-1].role == "user"
            and messages[-1].content == text
        )

    def _end_turn(self) -> None:
        self._busy_id = None
        self._busy_new_chat = False
        self._live_text = ""

    def _refresh_state(self) -> None:
        loading = self._loading
        self.loading_action.setVisible(loading)
        self.loading_label_action.setVisible(loading)
        self.model_combo.setEnabled(not loading and not self.busy)
        self.models_button.setEnabled(True)
        if loading:
            self.composer.set_disabled(
                "Loading the model… you can type meanwhile; sending waits for it."
            )
            self.composer.edit.setEnabled(True)
        elif self._model_info is None:
            self.composer.set_disabled(NO_MODEL_REASON)
        elif self.busy:
            self.composer.set_busy()
        else:
            self.composer.set_ready()
        self.chat_view.set_busy(self.busy)
        self.stop_action.setEnabled(self.busy)
        self._show_main()

    def _notify_store_recovery(self) -> None:
        if getattr(self.store, "recovered_from", None) is not None:
            self.banners.show_banner(
                "recovered",
                "warning",
                "The conversation database was damaged; it was moved to "
                f"{self.store.recovered_from} and a new one was started.",
            )
        replies = getattr(self.store, "recovered_replies", 0)
        if replies:
            self.banners.show_banner(
                "interrupted",
                "info",
                f"{replies} reply(s) cut off when Swapless last stopped were kept and "
                "marked stopped.",
                timeout_ms=15000,
            )

    def _undo_delete(self, conversation_id: int) -> None:
        self._pending_deletes.discard(conversation_id)
        self._refresh_conversation_list()

    def _commit_delete(self, conversation_id: int) -> None:
        if conversation_id not in self._pending_deletes:
            return
        if conversation_id == self._busy_id:
            # Its stopped reply is still being saved; delete right after.
            QTimer.singleShot(300, self, lambda: self._commit_delete(conversation_id))
            return
        self._pending_deletes.discard(conversation_id)
        try:
            self.store.delete_conversation(conversation_id)
        except KnownError as exc:
            log.warning("deleting conversation %s: %s", conversation_id, exc)
        self.worker.forget_conversation(conversation_id)

    # -- events and shutdown ------------------------------------------------------------

    def changeEvent(self, event) -> None:
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "chat_view"):
            self.chat_view.set_theme(markdown_theme(self.palette()))
            self._show_current(keep_live=True)
        super().changeEvent(event)

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop generation and the threads, commit deletes, close the store (idempotent)."""
        if self._is_shut_down:
            return
        self._is_shut_down = True
        started = time.monotonic()
        try:
            window_state.save_window_state(
                self.saveGeometry(), self.splitter.saveState(), self._current_id
            )
        except Exception as exc:  # losing the geometry must not block quitting
            log.warning("window state not saved: %s", exc)
        self.worker.cancel()
        if self._model_manager is not None:
            self._model_manager.cancel_download()
        if self._sampler_thread.isRunning():
            QMetaObject.invokeMethod(
                self.sampler, "stop", Qt.ConnectionType.BlockingQueuedConnection
            )
            self._sampler_thread.quit()
            self._sampler_thread.wait(500)
        self.worker.park()
        remaining = max(
            100, SHUTDOWN_WAIT_MS - int((time.monotonic() - started) * 1000)
        )
        stopped = self._worker_thread.wait(remaining)
        self.tasks.forget_all()
        self.tasks.wait(300)
        if not stopped:
            log.warning(
                "the generation thread did not stop in time (a model still loading?)"
            )
            _STUCK_THREADS.append(self._worker_thread)
            self.shut_down.emit()
            return
        # Back on this thread and stopped: let Qt own them, so they are deleted here
        # with the window, never by Python's garbage collector on another thread.
        for thing in (
            self.worker,
            self.sampler,
            self._worker_thread,
            self._sampler_thread,
        ):
            if thing.thread() is self.thread() and not (
                isinstance(thing, QThread) and thing.isRunning()
            ):
                thing.setParent(self)
        for conversation_id in list(self._pending_deletes):
            self._commit_delete(conversation_id)
        try:
            self.worker.engine.shutdown(timeout=0.5)
        except Exception as exc:
            log.warning("engine shutdown: %s", exc)
        self.store.close()
        self.shut_down.emit()
