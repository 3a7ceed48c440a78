"""Loading models: the request, the loading state, the outcome, the model to reload next time.

The loaded model itself is the engine's (`GenerationWorker.model_info` reads it); this
controller only knows whether a load is under way. Its signals come on the UI thread
after it has acted (remembered the model, shown a failure), so views and tests can wait
on them.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QMessageBox, QWidget

from app.ui.common.dialogs import show_failure

DEMO = "demo"
BUSY_MESSAGE = "Stop the reply first, then change the model."


class ModelController(QObject):
    """Loads models through the worker.

    Args:
        worker: The generation worker.
        settings: The `SettingsController` (the last model is remembered there).
        is_busy: True while a reply is being written (no model change then).
        window: Parent of the failure dialog.
    """

    loading_started = Signal(str)  # a folder, or "demo"
    loaded = Signal(object)  # ModelInfo
    load_failed = Signal(object)  # WorkerError
    load_refused = Signal(str)  # why a load was not started

    def __init__(self, worker, settings, is_busy: Callable[[], bool], window: QWidget):
        super().__init__(window)
        self._worker = worker
        self._settings = settings
        self._is_busy = is_busy
        self._window = window
        self.loading = False
        self.error_dialog: QMessageBox | None = None
        worker.model_loading_started.connect(self._on_worker_model_loading_started)
        worker.model_loaded.connect(self._on_worker_model_loaded)
        worker.model_load_failed.connect(self._on_worker_model_load_failed)

    @property
    def info(self):
        """The loaded model's `ModelInfo`, or None."""
        return self._worker.model_info

    def load(self, folder: str) -> bool:
        """Load a model folder on the worker; False when refused (a reply is running)."""
        if self._is_busy():
            self.load_refused.emit(BUSY_MESSAGE)
            return False
        self._worker.load_model(str(folder))
        return True

    def load_demo(self) -> bool:
        """Build the demo model if needed and load it; False when refused."""
        if self._is_busy():
            self.load_refused.emit(BUSY_MESSAGE)
            return False
        self._worker.load_demo_model()
        return True

    def _on_worker_model_loading_started(self, folder: str) -> None:
        self.loading = True
        self.loading_started.emit(folder)

    def _on_worker_model_loaded(self, info) -> None:
        self.loading = False
        self._settings.remember_model(info.folder)
        self.loaded.emit(info)

    def _on_worker_model_load_failed(self, error) -> None:
        self.loading = False
        self.error_dialog = show_failure(
            self._window, "Could not load the model", error
        )
        self.load_failed.emit(error)
