"""The main window: conversations on the left, the chat in the centre, memory at the bottom.

The window only builds the views and the controllers and connects them; behaviour lives
in the controllers, each with its own signals and tests:

* `SettingsController`: the settings, their dialog, the theme;
* `ModelController` and `ModelPickerController`: loading models, the picker, Models…;
* `QualityCheckController`: Check quality in Models…, the stored results of the
  loaded model that the preset picker and editor show;
* `CurrentConversationController` and `PresetPickerController`: the open conversation
  and its preset;
* `TurnController` and `DocumentController`: turns, the live reply, documents;
* `ConversationListController`: the list, search, rename, delete with undo;
* `NoticesController`: the notice line; `ContextMeterController`: the context meter;
* `ServerController`: the local server of the Settings switch.

Model work runs on the `GenerationWorker`'s thread and memory sampling on the
`MemorySampler`'s (`WindowThreads`); closing the window stops a reply in progress (the
core keeps it, marked stopped), stops both threads, commits pending deletes and closes
the store, within about two seconds.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtGui import QAction, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QMainWindow,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.core.files import paths
from app.core.models.model_catalog import reference_model_folder
from app.core.settings import AppSettings
from app.ui import window_state
from app.ui.chat.chat_view import ChatView
from app.ui.chat.composer_view import ComposerView
from app.ui.chat.current_conversation_controller import CurrentConversationController
from app.ui.chat.pin_controller import PinController
from app.ui.chat.tools.tool_card_controller import ToolCardController
from app.ui.chat.turn_controller import TurnController
from app.ui.common.background import TaskSet
from app.ui.common.icons import refresh_icons
from app.ui.common.theme import markdown_theme, refresh_style_sheets
from app.ui.conversations.conversation_list_controller import ConversationListController
from app.ui.conversations.conversation_list_view import ConversationListView
from app.ui.documents.document_card_view import DocumentCardView
from app.ui.documents.document_controller import DocumentController
from app.ui.models.model_controller import DEMO, ModelController
from app.ui.models.model_picker_controller import ModelPickerController
from app.ui.models.quality_check_controller import QualityCheckController
from app.ui.models.welcome_view import WelcomeView
from app.ui.presets.preset_picker_controller import PresetPickerController
from app.ui.server.server_controller import ServerController
from app.ui.settings.settings_controller import SettingsController
from app.ui.status.context_meter_controller import ContextMeterController
from app.ui.status.notices_controller import NoticesController
from app.ui.status.status_area_view import StatusAreaView
from app.ui.status.toast_view import ToastView
from app.ui.toolbar_view import ToolbarView
from app.ui.window_threads import WindowThreads

log = logging.getLogger(__name__)

# Fits a 1280×800 or 1366×768 screen with its panels; the window never asks for more.
DEFAULT_SIZE = (1180, 720)


class MainWindow(QMainWindow):
    """The Swapless window.

    Args:
        store: The open store; the window closes it when it shuts down.
        settings: App settings (defaults when None).
        engine: Only for tests: an engine to use instead of a new real one.
        restore_state: Restore geometry and the last conversation from the last run.
        load_last_model: Load the model of the last run, if it still exists.
    """

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
        self.resize(*DEFAULT_SIZE)
        icon = paths.resources_dir() / "icon.svg"
        if icon.is_file():
            self.setWindowIcon(QIcon(str(icon)))
        self.store = store
        self._is_shut_down = False
        self._refreshing_style = False
        self.threads = WindowThreads(store, engine, settings or AppSettings())
        self.worker, self.sampler = self.threads.worker, self.threads.sampler
        self._build_views()
        self._build_controllers(settings or AppSettings())
        self._build_actions()
        self._connect()
        self.chat_view.set_theme(markdown_theme(self.palette()))
        self.memory_gauge.set_cap_fraction(
            self.settings_controller.settings.memory_cap_fraction
        )
        self.threads.start()
        self._start(restore_state, load_last_model)

    # -- construction ------------------------------------------------------------------

    def _build_views(self) -> None:
        self.toolbar = ToolbarView(self)
        self.addToolBar(self.toolbar)
        self.list_view = ConversationListView()
        self.chat_view = ChatView()
        self.welcome_view = WelcomeView()
        self.composer = ComposerView()
        self.main_stack = QStackedWidget()
        self.main_stack.addWidget(self.welcome_view)
        self.main_stack.addWidget(self.chat_view)
        self.toast = ToastView(self.main_stack)
        centre = QWidget()
        centre_layout = QVBoxLayout(centre)
        centre_layout.setContentsMargins(0, 0, 0, 0)
        centre_layout.setSpacing(0)
        centre_layout.addWidget(self.main_stack, 1)
        self.document_card = DocumentCardView()
        self.composer.add_card(self.document_card)
        centre_layout.addWidget(self.composer)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setObjectName("mainSplitter")
        self.splitter.addWidget(self.list_view)
        self.splitter.addWidget(centre)
        self.splitter.setStretchFactor(0, 0)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([260, DEFAULT_SIZE[0] - 260])
        self.splitter.setChildrenCollapsible(False)
        self.status_area = StatusAreaView()
        self.notice_area = self.status_area.notice_area
        self.memory_gauge = self.status_area.memory_gauge
        self.context_meter = self.status_area.context_meter
        self.document_progress = self.status_area.document_progress
        root = QWidget()
        root_layout = QVBoxLayout(root)
        root_layout.setContentsMargins(0, 0, 0, 0)
        root_layout.setSpacing(0)
        root_layout.addWidget(self.splitter, 1)
        root_layout.addWidget(self.status_area)
        self.setCentralWidget(root)

    def _build_controllers(self, settings: AppSettings) -> None:
        worker = self.worker
        self.settings_controller = SettingsController(settings, worker, self)
        self.models = ModelController(
            worker, self.settings_controller, self._busy, self
        )
        self.current = CurrentConversationController(
            self.store, worker, self.settings_controller, self
        )
        self.turns = TurnController(
            self.store,
            worker,
            self.chat_view,
            self.composer,
            self.current,
            self.models,
            self,
        )
        self.documents = DocumentController(
            self.threads.documents,
            worker,
            self.store,
            self.turns,
            self.current,
            self.models,
            self.composer,
            self.document_card,
            self.document_progress,
            self,
        )
        self.conversation_list = ConversationListController(
            self.store,
            self.list_view,
            self.toast,
            self.current,
            self.turns,
            worker,
            self,
        )
        self.notices = NoticesController(self.notice_area, self)
        self.pins = PinController(self.store, self.chat_view, self)
        self.tool_cards = ToolCardController(worker, self.chat_view, self.turns, self)
        self.meter = ContextMeterController(
            self.context_meter,
            worker,
            self.current,
            self.models,
            self.turns,
            self.settings_controller,
            self,
        )
        self.quality = QualityCheckController(
            worker, self.models, self.store, lambda: self.turns.busy, self
        )
        # A message sent during a check or while a document is read (in another
        # conversation) waits for the model; its footer says what it waits for.
        self.turns.waiting = lambda: (
            self.quality.waiting_words() or self.documents.waiting_words()
        )
        for signal in (
            self.quality.check_progressed,
            self.quality.check_finished,
            self.quality.check_failed,
            self.documents.segment_read,
            self.documents.busy_changed,
        ):
            signal.connect(self.turns.refresh_waiting)
        self.model_picker = ModelPickerController(
            self.toolbar,
            self.models,
            self.settings_controller,
            self.sampler,
            self,
            quality=self.quality,
        )
        self.preset_picker = PresetPickerController(
            self.toolbar, self.current, self, quality=self.quality, models=self.models
        )
        self.server = ServerController(worker, self.settings_controller, self)

    def _build_actions(self) -> None:
        self.new_chat_action = self._action(
            "New chat", QKeySequence.StandardKey.New, self._new_chat
        )
        self.search_action = self._action(
            "Search", QKeySequence.StandardKey.Find, self.list_view.focus_search
        )
        self.stop_action = self._action(
            "Stop",
            QKeySequence(Qt.Key.Key_Escape),
            self._stop,
        )
        self.settings_action = self._action(
            "Settings", QKeySequence("Ctrl+,"), self.settings_controller.open_dialog
        )
        # Qt reads "Ctrl" as Cmd on a Mac; the platform's Quit key is empty on some.
        self.quit_action = self._action("Quit", QKeySequence("Ctrl+Q"), self.close)
        self.stop_action.setEnabled(False)

    def _stop(self) -> None:
        """Esc: stop the reading the open conversation waits for, else the reply."""
        if not self.documents.stop_here():
            self.turns.stop()

    def _new_chat(self) -> None:
        """A new chat, ready to type in (Ctrl+N)."""
        self.current.new_chat()
        self.composer.edit.setFocus()

    def _action(self, text: str, shortcut, slot) -> QAction:
        action = QAction(text, self)
        action.setShortcut(shortcut)
        action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _connect(self) -> None:
        models, notices, turns = self.models, self.notices, self.turns
        self.sampler.snapshot_taken.connect(self.memory_gauge.update_snapshot)
        self.sampler.snapshot_taken.connect(notices.show_pressure)
        models.loading_started.connect(self._on_models_loading_started)
        models.loaded.connect(self._on_models_loaded)
        models.loaded.connect(notices.show_model_loaded)
        models.load_failed.connect(self._on_models_load_failed)
        models.load_refused.connect(notices.show_refusal)
        turns.busy_changed.connect(self._on_turns_busy_changed)
        self.documents.busy_changed.connect(self._on_turns_busy_changed)
        self.documents.conversation_created.connect(self.conversation_list.refresh)
        self.documents.document_failed.connect(notices.show_reply_failed)
        self.documents.refused.connect(notices.show_document_refused)
        turns.trimmed.connect(notices.show_trim)
        self.pins.refused.connect(notices.show_refusal)
        turns.reply_failed.connect(notices.show_reply_failed)
        self.documents.document_started.connect(notices.show_document_started)
        self.documents.document_finished.connect(notices.show_document_finished)
        self.current.title_changed.connect(self.setWindowTitle)
        self.current.opened.connect(self._update_main_view)
        self.welcome_view.models_requested.connect(self.model_picker.open_manager)
        self.welcome_view.demo_requested.connect(models.load_demo)
        self.welcome_view.reference_requested.connect(
            lambda: models.load(str(reference_model_folder()))
        )
        self.toolbar.settings_button.clicked.connect(
            self.settings_controller.open_dialog
        )
        self.settings_controller.settings_changed.connect(
            self._on_settings_controller_settings_changed
        )
        notices.open_models = self.model_picker.open_manager
        self.server.status_changed.connect(self.status_area.server_status.set_status)
        self.server.failed.connect(notices.show_server_failed)

    def _start(self, restore_state: bool, load_last_model: bool) -> None:
        self.conversation_list.refresh()
        restored = None
        if restore_state:
            geometry, splitter, restored = window_state.load_window_state()
            if geometry is not None:
                self.restoreGeometry(geometry)
            if splitter is not None:
                self.splitter.restoreState(splitter)
        if restored is not None and restored in self.list_view.conversation_ids():
            self.current.open(restored)
        else:
            self.current.new_chat()
        self.notices.show_store_recovery(self.store)
        self.model_picker.fill()
        self.model_picker.refresh()
        self.turns.refresh_composer()
        self.server.start_if_enabled()
        last = self.settings_controller.settings.last_model
        if load_last_model and last and Path(last).is_dir():
            self.models.load(last)
        self.composer.focus()

    # -- what the window itself shows ----------------------------------------------------

    def _update_main_view(self, *_args) -> None:
        welcome = self.models.info is None and self.current.conversation_id is None
        self.main_stack.setCurrentWidget(
            self.welcome_view if welcome and not self._busy() else self.chat_view
        )

    def _on_models_loading_started(self, folder: str) -> None:
        text = "Building the demo model…" if folder == DEMO else ""
        self.welcome_view.set_loading(True, text)

    def _on_models_loaded(self, info) -> None:
        self.welcome_view.set_loading(False)
        self.memory_gauge.set_weights_bytes(info.weights_bytes)
        self.sampler.enable_mlx_stats()
        self._update_main_view()

    def _on_models_load_failed(self, _error) -> None:
        self.welcome_view.set_loading(False)
        if self.models.info is None:
            self.memory_gauge.set_weights_bytes(0)
        self._update_main_view()

    def _busy(self) -> bool:
        """A reply or a document is being written (the model must not change)."""
        return self.turns.busy or self.documents.busy

    def _on_turns_busy_changed(self, _busy: bool) -> None:
        busy = self._busy()
        self.stop_action.setEnabled(busy)
        self.model_picker.set_enabled(not busy)
        self._update_main_view()

    def _on_settings_controller_settings_changed(self, settings, _previous) -> None:
        self.memory_gauge.set_cap_fraction(settings.memory_cap_fraction)
        self.threads.documents.settings = settings  # read when the next reading starts

    # -- events and shutdown ------------------------------------------------------------

    def _views(self) -> tuple[QObject, ...]:
        return (
            self.toolbar,
            self.list_view,
            self.chat_view,
            self.welcome_view,
            self.composer,
            self.toast,
            self.notice_area,
            self.document_card,
            self.document_progress,
        )

    def _controllers(self) -> tuple[QObject, ...]:
        return (
            self.settings_controller,
            self.models,
            self.current,
            self.turns,
            self.documents,
            self.conversation_list,
            self.notices,
            self.meter,
            self.model_picker,
            self.preset_picker,
            self.quality,
            self.server,
        )

    def changeEvent(self, event) -> None:
        if (
            event.type() == QEvent.Type.PaletteChange
            and hasattr(self, "chat_view")
            and not self._refreshing_style
        ):
            # Style sheets keep the colours of the palette they were polished with.
            self._refreshing_style = True
            try:
                refresh_style_sheets(self)
                refresh_icons(self)
                self.chat_view.set_theme(markdown_theme(self.palette()))
            finally:
                self._refreshing_style = False
        super().changeEvent(event)

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)

    def shutdown(self) -> None:
        """Stop generation and the threads, commit deletes, close the store (idempotent)."""
        if self._is_shut_down:
            return
        self._is_shut_down = True
        try:
            window_state.save_window_state(
                self.saveGeometry(),
                self.splitter.saveState(),
                self.current.conversation_id,
            )
        except Exception as exc:  # losing the geometry must not block quitting
            log.warning("window state not saved: %s", exc)
        if self.model_picker.manager is not None:
            self.model_picker.manager.cancel_download()
        self.quality.shutdown()  # its measured cells are saved before the store closes
        self.server.stop()  # its replies stop within a token, before the engine does
        self.documents.shutdown()
        stopped = self.threads.stop()
        for tasks in self.findChildren(TaskSet):
            tasks.forget_all()
        TaskSet.wait(300)
        # Results the threads queued before they stopped, and views reacting to the
        # window closing (a list taking focus selects a row), would reach a closed store.
        for receiver in [self, *self.findChildren(QObject)]:
            QCoreApplication.removePostedEvents(receiver, QEvent.Type.MetaCall)
        for source in (*self._views(), *self._controllers()):
            source.blockSignals(True)
        self.turns.close()
        if not stopped:
            return
        self.threads.hand_over(self)
        self.conversation_list.commit_all()
        self.threads.release_engine()
        self.store.close()
