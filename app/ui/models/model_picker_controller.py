"""The model picker, the Models… dialog and the list of models on this machine.

The catalog is searched off the UI thread (`model_catalog.find_models`) at start, when
the search folders change, after a download and after a model loads (the demo is built
on first use, after the first search). The loaded model is always listed, in the picker
and in the dialog, even when it lives outside every searched place.
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Qt

from app.core.files import paths
from app.core.models.model_catalog import SOURCE_LOADED, LocalModel, folder_size
from app.ui.common.background import TaskSet
from app.ui.models.model_controller import DEMO

log = logging.getLogger(__name__)

MANAGE = "manage"


class ModelPickerController(QObject):
    """Fills the model picker and opens the model manager.

    Args:
        toolbar: The `ToolbarView`.
        models: The `ModelController`.
        settings: The `SettingsController` (search folders).
        sampler: The memory sampler (its newest snapshot feeds the verdicts).
        window: Parent of the dialog.
        quality: The `QualityCheckController` behind the dialog's quality box, or
            None.
    """

    def __init__(self, toolbar, models, settings, sampler, window, quality=None):
        super().__init__(window)
        self._toolbar = toolbar
        self._combo = toolbar.model_combo
        self._models = models
        self._settings = settings
        self._sampler = sampler
        self._window = window
        self._quality = quality
        self._tasks = TaskSet(self)
        self._filling = False
        self.found: list[LocalModel] = []
        self.manager = None
        self._combo.activated.connect(self._on_model_combo_activated)
        toolbar.models_button.clicked.connect(self.open_manager)
        models.loading_started.connect(self._on_models_loading_started)
        models.loaded.connect(self._on_models_loaded)
        models.load_failed.connect(self._on_models_load_failed)
        settings.settings_changed.connect(self._on_settings_settings_changed)

    def listed(self) -> list[LocalModel]:
        """The models found, with the loaded one added when no search found it."""
        info = self._models.info
        if info is None or any(str(m.path) == info.folder for m in self.found):
            return list(self.found)
        folder = Path(info.folder)
        loaded = LocalModel(
            name=folder.name,
            path=folder,
            source=SOURCE_LOADED,
            size_bytes=folder_size(folder),
            is_demo=folder.resolve() == paths.demo_model_dir().resolve(),
        )
        return [loaded, *self.found]

    def refresh(self) -> None:
        """Search for local models again (off the UI thread), then refill."""
        from app.core.models.model_catalog import find_models

        folders = list(self._settings.settings.model_folders)
        # Only the newest search counts: an older one (started before a folder was
        # added, say) can finish last, and its list would hide the new folder's models.
        self._tasks.forget_all()
        self._tasks.start(
            lambda _report: find_models(folders),
            on_finished=self._on_catalog_found,
            on_failed=lambda exc: log.warning(
                "model search failed: %s", exc, exc_info=exc
            ),
        )

    def open_manager(self) -> None:
        """Open the model manager (one per window; a download goes on while hidden)."""
        from app.ui.models.model_manager_dialog import ModelManagerDialog

        if self.manager is None:
            self.manager = ModelManagerDialog(self._window)
            self.manager.load_requested.connect(self._models.load)
            self.manager.demo_requested.connect(self._models.load_demo)
            self.manager.folders_changed.connect(self._settings.set_model_folders)
            self.manager.catalog_changed.connect(self.refresh)
            if self._quality is not None:
                self._quality.attach_panel(self.manager.quality_panel)
        self.manager.set_context(self._settings.settings, self._sampler.latest)
        self._update_manager()
        if self._quality is not None:
            self._quality.show_stored()
        self.manager.show()
        self.manager.raise_()

    def set_enabled(self, enabled: bool) -> None:
        """Allow or forbid picking another model (forbidden while a reply runs)."""
        self._combo.setEnabled(enabled and not self._models.loading)

    def fill(self) -> None:
        """Fill the picker: the models found, the demo, and "Manage models…"."""
        info = self._models.info
        loaded = info.folder if info else None
        self._filling = True
        try:
            self._combo.clear()
            if loaded is None:
                self._combo.addItem("No model loaded", None)
            for model in self.listed():
                if model.is_demo:
                    continue  # the demo has its own entry
                self._combo.addItem(
                    f"{model.name}  ·  {model.source_label}", str(model.path)
                )
                self._combo.setItemData(
                    self._combo.count() - 1,
                    str(model.path),
                    Qt.ItemDataRole.ToolTipRole,
                )
            self._combo.addItem("Demo model (random weights)", DEMO)
            self._combo.insertSeparator(self._combo.count())
            self._combo.addItem("Manage models…", MANAGE)
            if loaded is None:
                index = 0
            elif info.random_weights and self._combo.findData(loaded) < 0:
                index = self._combo.findData(DEMO)
            else:
                index = max(0, self._combo.findData(loaded))
            self._combo.setCurrentIndex(index)
        finally:
            self._filling = False

    def _update_manager(self) -> None:
        if self.manager is not None:
            info = self._models.info
            self.manager.set_models(self.listed(), info.folder if info else None)

    def _on_catalog_found(self, models) -> None:
        self.found = list(models)
        self.fill()
        self._update_manager()

    def _on_model_combo_activated(self, index: int) -> None:
        if self._filling:
            return
        data = self._combo.itemData(index)
        info = self._models.info
        if data == MANAGE:
            self.fill()  # "Manage models…" is not a model: show the loaded one again
            self.open_manager()
        elif data == DEMO:
            if info is None or not info.random_weights:
                self._models.load_demo()
        elif data and (info is None or data != info.folder):
            self._models.load(data)

    def _on_models_loading_started(self, folder: str) -> None:
        self._toolbar.set_loading(
            "Building the demo model…" if folder == DEMO else "Loading the model…"
        )
        self._combo.setEnabled(False)

    def _on_models_loaded(self, _info) -> None:
        self._toolbar.set_loading(None)
        self._combo.setEnabled(True)
        self.fill()
        self._update_manager()
        self.refresh()

    def _on_models_load_failed(self, _error) -> None:
        self._toolbar.set_loading(None)
        self._combo.setEnabled(True)
        self.fill()

    def _on_settings_settings_changed(self, settings, previous) -> None:
        if settings.model_folders != previous.model_folders:
            self.refresh()
        if self.manager is not None:
            self.manager.set_context(settings, self._sampler.latest)
