"""The app settings while the window runs: the one copy, the dialog, saving, the theme.

Everything that depends on a setting (the memory gauge's cap line, the model search
folders, the device budget in the engine, the preset of new chats) listens to
`settings_changed` instead of holding its own copy. A theme change is applied to the
whole application at once (`theme.apply_theme`); the window repaints its views when its
palette changes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QDialog, QWidget

from app.core.errors import SettingsError
from app.core.presets.presets import all_presets
from app.core.settings import AppSettings, save_settings
from app.ui.common.dialogs import show_error
from app.ui.common.theme import apply_theme

if TYPE_CHECKING:  # imported when first opened
    from app.ui.settings.settings_dialog import SettingsDialog

log = logging.getLogger(__name__)


class SettingsController(QObject):
    """Holds `AppSettings`, saves changes and tells the others.

    Args:
        settings: The settings the app started with.
        worker: The generation worker (it takes budget and prefix-cache changes).
        window: Parent of the dialogs.
    """

    settings_changed = Signal(object, object)  # new settings, previous settings

    def __init__(self, settings: AppSettings, worker, window: QWidget):
        super().__init__(window)
        self._settings = settings
        self._worker = worker
        self._window = window
        self.dialog: SettingsDialog | None = None
        self.tools_dialog: QDialog | None = None

    @property
    def settings(self) -> AppSettings:
        """The settings in force."""
        return self._settings

    def open_dialog(self) -> None:
        """Open the settings dialog (non-blocking)."""
        from app.ui.settings.settings_dialog import SettingsDialog

        dialog = SettingsDialog(self._settings, list(all_presets()), self._window)
        self.dialog = dialog
        dialog.settings_accepted.connect(self.apply)
        dialog.tools_requested.connect(self.open_tools_dialog)
        dialog.open()

    def open_tools_dialog(self) -> None:
        """Open Settings › Tool servers for the open conversation (or new chats)."""
        from app.ui.settings.mcp_servers_dialog import McpServersDialog

        current = getattr(self._window, "current", None)
        conversation_id = getattr(current, "conversation_id", None)
        dialog = McpServersDialog(conversation_id, self._window)
        self.tools_dialog = dialog
        dialog.saved.connect(self._worker.reload_tools)
        dialog.open()

    def apply(self, settings: AppSettings) -> None:
        """Save ``settings`` and use them from now on (a failed save is reported)."""
        try:
            save_settings(settings)
        except SettingsError as exc:
            show_error(self._window, "Settings not saved", str(exc))
        previous, self._settings = self._settings, settings
        if settings.theme != previous.theme:
            app = QApplication.instance()
            assert isinstance(app, QApplication), "the window runs in a QApplication"
            apply_theme(app, settings.theme)
        self._worker.apply_settings(settings)
        self.settings_changed.emit(settings, previous)

    def remember_model(self, folder: str) -> None:
        """Load ``folder`` at the next start (quietly: losing this is no disaster)."""
        if self._settings.last_model == folder:
            return
        try:
            self._settings = self._settings.with_changes(last_model=folder)
            save_settings(self._settings)
        except SettingsError as exc:
            log.warning("could not remember the model: %s", exc)

    def set_model_folders(self, folders: list[str]) -> None:
        """Search ``folders`` for models from now on."""
        try:
            self.apply(self._settings.with_changes(model_folders=tuple(folders)))
        except SettingsError as exc:
            show_error(self._window, "Folder not added", str(exc))
