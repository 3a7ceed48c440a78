"""The preset picker and the preset editor, for the open conversation.

The picker lists the built-in and user presets and shows the open conversation's; a
preset changed for one conversation is listed as "name · changed here", one that exists
only there as "name · this conversation" (the picker is as wide as its longest entry, so
a name is never cut). Choosing or editing a preset goes
to `CurrentConversationController.set_preset`, which saves it with the conversation.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt

from app.core.errors import SettingsError
from app.core.presets import Preset, all_presets, get_preset
from app.ui.dialogs import show_error

CHANGED = " · changed here"  # a listed preset, changed for this conversation
OWN = " · this conversation"  # a preset that exists only in this conversation


class PresetPickerController(QObject):
    """Fills the preset picker and opens the editor.

    Args:
        toolbar: The `ToolbarView`.
        current: The `CurrentConversationController`.
        window: Parent of the dialogs.
    """

    def __init__(self, toolbar, current, window):
        super().__init__(window)
        self._combo = toolbar.preset_combo
        self._current = current
        self._window = window
        self._presets: dict[str, Preset] = {}
        self._filling = False
        self.editor = None
        self._combo.activated.connect(self._on_preset_combo_activated)
        toolbar.preset_button.clicked.connect(self.open_editor)
        current.preset_changed.connect(self.select)
        self.fill()

    def fill(self) -> None:
        """List the presets (again, e.g. after one was saved)."""
        self._filling = True
        try:
            self._presets = all_presets()
            self._combo.clear()
            for name, preset in self._presets.items():
                self._combo.addItem(name, name)
                self._combo.setItemData(
                    self._combo.count() - 1,
                    preset.description,
                    Qt.ItemDataRole.ToolTipRole,
                )
        finally:
            self._filling = False
        self.select(self._current.preset())

    def select(self, preset: Preset) -> None:
        """Show ``preset`` as the open conversation's."""
        changed = preset != self._presets.get(preset.name)
        self._filling = True
        try:
            # One entry at most after the presets: the open conversation's own.
            while self._combo.count() > len(self._presets):
                self._combo.removeItem(self._combo.count() - 1)
            if changed:
                suffix = CHANGED if preset.name in self._presets else OWN
                self._combo.addItem(preset.name + suffix, preset.name)
                index = self._combo.count() - 1
            else:
                index = self._combo.findData(preset.name)
            self._combo.setCurrentIndex(index)
            self._combo.setToolTip(
                preset.description
                + ("\n(changed for this conversation)" if changed else "")
            )
        finally:
            self._filling = False

    def open_editor(self) -> None:
        """Edit the open conversation's preset (or save a copy as a user preset)."""
        from app.ui.preset_editor_dialog import PresetEditorDialog

        self.editor = PresetEditorDialog(self._current.preset(), self._window)
        self.editor.preset_applied.connect(self._current.set_preset)
        self.editor.preset_saved.connect(lambda _preset: self.fill())
        self.editor.open()

    def _on_preset_combo_activated(self, index: int) -> None:
        if self._filling:
            return
        name = self._combo.itemData(index)
        current = self._current.preset()
        if index >= len(self._presets):  # the conversation's own entry: nothing to do
            return
        if name == current.name and current == self._presets.get(name):
            return
        try:
            preset = get_preset(name)
        except SettingsError as exc:
            show_error(self._window, "Cannot use this preset", str(exc))
            self.select(current)
            return
        self._current.set_preset(preset)
