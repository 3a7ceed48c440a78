"""The preset picker and the preset editor, for the open conversation.

The picker lists the built-in and user presets and shows the open conversation's; a
preset changed for one conversation is listed as "name · changed here", one that exists
only there as "name · this conversation" (the picker is as wide as its longest entry, so
a name is never cut). Choosing or editing a preset goes
to `CurrentConversationController.set_preset`, which saves it with the conversation.

With a model loaded, each preset in the list carries what its compression measured on
that model (`preset_quality`: the core writes the words; `PresetItemDelegate` shows
them beside the name), and the label beside the picker says it for the open
conversation's preset. A preset whose KV precision fails a threshold on this model
gets the warning icon, the warning colour and the warning as its tooltip; nothing is
changed for the user. With nothing measured the label says so, muted.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QApplication, QStyle

from app.core.errors import KnownError, SettingsError
from app.core.presets.presets import Preset, all_presets, get_preset
from app.core.quality.preset_quality import PresetQuality, preset_quality
from app.ui.common.dialogs import show_error
from app.ui.common.elided_label import MUTED, WARNING
from app.ui.presets.preset_item_delegate import (
    QUALITY_ROLE,
    WARNING_ROLE,
    PresetItemDelegate,
)

CHANGED = " · changed here"  # a listed preset, changed for this conversation
OWN = " · this conversation"  # a preset that exists only in this conversation


class PresetPickerController(QObject):
    """Fills the preset picker and opens the editor.

    Args:
        toolbar: The `ToolbarView`.
        current: The `CurrentConversationController`.
        window: Parent of the dialogs.
        quality: The `QualityCheckController` (stored results of the loaded model),
            or None for no annotations.
        models: The `ModelController` (the editor warns past the loaded model's
            trained context), or None.
    """

    def __init__(self, toolbar, current, window, quality=None, models=None):
        super().__init__(window)
        self._models = models
        self._combo = toolbar.preset_combo
        self._label = toolbar.preset_quality_label
        self._current = current
        self._window = window
        self._quality = quality
        self._presets: dict[str, Preset] = {}
        self._stored: dict | None = None
        self._filling = False
        self.editor = None
        self._combo.setItemDelegate(PresetItemDelegate(self._combo))
        self._combo.activated.connect(self._on_preset_combo_activated)
        toolbar.preset_button.clicked.connect(self.open_editor)
        current.preset_changed.connect(self.select)
        if quality is not None:
            quality.results_changed.connect(self._on_quality_results_changed)
        self.fill()

    def fill(self) -> None:
        """List the presets (again, e.g. after one was saved)."""
        self._filling = True
        try:
            self._presets = all_presets()
            self._stored = self._quality.stored() if self._quality else None
            self._combo.clear()
            for name, preset in self._presets.items():
                self._combo.addItem(name, name)
                self._annotate(self._combo.count() - 1, preset)
        finally:
            self._filling = False
        self.select(self._current.preset())

    def quality_of(self, preset: Preset) -> PresetQuality | None:
        """What was measured about ``preset`` on the loaded model (None: no model)."""
        if self._stored is None:
            return None
        return preset_quality({preset.name: preset}, self._stored)[0]

    def _annotate(self, index: int, preset: Preset) -> None:
        """Give one entry its tooltip, and its quality phrase and warning if measured."""
        quality = self.quality_of(preset)
        if quality is not None and not quality.measured:
            quality = None  # only a measured quality is shown
        tooltip = [preset.description]
        if quality is not None:
            tooltip += quality.lines()
            if quality.warning:
                tooltip.append("Warning: " + quality.warning)
        combo = self._combo
        combo.setItemData(index, "\n".join(tooltip), Qt.ItemDataRole.ToolTipRole)
        combo.setItemData(
            index, quality.summary if quality is not None else None, QUALITY_ROLE
        )
        warning = quality.warning if quality is not None else None
        combo.setItemData(index, warning, WARNING_ROLE)
        icon = (
            QApplication.style().standardIcon(
                QStyle.StandardPixmap.SP_MessageBoxWarning
            )
            if warning
            else None
        )
        combo.setItemData(index, icon, Qt.ItemDataRole.DecorationRole)

    def _show_label(self, preset: Preset) -> None:
        """The phrase beside the picker, for the open conversation's preset."""
        quality = self.quality_of(preset)
        if quality is None:
            self._label.set_parts([])
            self._label.setToolTip("")
        elif quality.warning:
            self._label.set_parts([("⚠ " + quality.summary, WARNING)])
            self._label.setToolTip(quality.warning)
        elif quality.measured:
            self._label.set_parts([(quality.summary, None)])
            self._label.setToolTip("\n".join(quality.lines()))
        else:
            self._label.set_parts([(quality.summary, MUTED)])
            self._label.setToolTip(
                "Models… → Check quality measures what this preset's compression "
                "costs in answers on the loaded model."
            )

    def _on_quality_results_changed(self, _identity: str) -> None:
        self.fill()

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
                self._annotate(index, preset)
            else:
                index = self._combo.findData(preset.name)
            self._combo.setCurrentIndex(index)
            self._combo.setToolTip(
                self._combo.itemData(index, Qt.ItemDataRole.ToolTipRole)
                + ("\n(changed for this conversation)" if changed else "")
            )
        finally:
            self._filling = False
        self._show_label(preset)
        self._fit_list()

    def _fit_list(self) -> None:
        """Widen the open list to its longest line (the combo sizes it by names only)."""
        view = self._combo.view()
        scroll_bar = view.verticalScrollBar().sizeHint().width()
        view.setMinimumWidth(
            view.sizeHintForColumn(0) + 2 * view.frameWidth() + scroll_bar
        )

    def open_editor(self) -> None:
        """Edit the open conversation's preset (or save a copy as a user preset)."""
        from app.ui.presets.preset_editor_dialog import PresetEditorDialog

        info = self._models.info if self._models is not None else None
        self.editor = PresetEditorDialog(
            self._current.preset(),
            self._window,
            quality=self._stored,
            trained_context=_trained_context(info),
        )
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


def _trained_context(info) -> int | None:
    """The loaded model's trained context, from its config (None when unknown)."""
    if info is None:
        return None
    from app.core.budget.model_geometry import read_geometry

    try:
        return read_geometry(Path(info.folder)).max_position_embeddings
    except (KnownError, OSError, ValueError):
        return None
