"""The toolbar: model picker, Models…, loading indicator, preset picker, Edit preset…, Settings.

Layout only: the `ModelPickerController` and `PresetPickerController` fill the pickers
and act on them; beside the preset picker a label says what the chosen preset's
compression measured on the loaded model (elided when the window is narrow). The preset picker is as wide as its longest entry, so a preset's name is
never cut mid-word; the model picker has a fixed number of characters and elides, as
model folder names can be very long.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QToolBar,
    QWidget,
)

from app.ui.common.elided_label import ElidedLabel
from app.ui.common.icons import set_icon

MODEL_PICKER_CHARS = 28
PICKER_ARROW_ROOM = 36
"""Pixels a combo box needs beside its text: the arrow, its frame and padding."""


class ToolbarView(QToolBar):
    """The window's one toolbar."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Model and preset", parent)
        self.setObjectName("mainToolbar")
        self.setMovable(False)
        self.setFloatable(False)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.PreventContextMenu)
        self.addWidget(QLabel(" Model "))
        self.model_combo = QComboBox()
        self.model_combo.setObjectName("modelPicker")
        self.model_combo.setMinimumContentsLength(MODEL_PICKER_CHARS)
        self.model_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model_combo.setToolTip("The model that writes the replies")
        self.addWidget(self.model_combo)
        self.models_button = QPushButton("Models…")
        set_icon(self.models_button, "boxes")
        self.models_button.setToolTip(
            "Model manager: local models, downloads, what fits"
        )
        self.addWidget(self.models_button)
        self.loading_bar = QProgressBar()
        self.loading_bar.setRange(0, 0)
        self.loading_bar.setMaximumWidth(90)
        self.loading_bar.setMaximumHeight(12)
        self.loading_bar.setTextVisible(False)
        self._loading_bar_action = self.addWidget(self.loading_bar)
        self.loading_label = QLabel()
        self._loading_label_action = self.addWidget(self.loading_label)
        self.addSeparator()
        self.addWidget(QLabel(" Preset "))
        self.preset_combo = QComboBox()
        self.preset_combo.setObjectName("presetPicker")
        self.preset_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToContents
        )
        self.addWidget(self.preset_combo)
        # AdjustToContents alone came out 10 px short under the application style sheet
        # after a theme switch (its size hint kept from the old style): the longest
        # entry and the arrow's room are made its minimum whenever the entries change.
        model = self.preset_combo.model()
        model.rowsInserted.connect(self._fit_preset_picker)
        model.dataChanged.connect(self._fit_preset_picker)
        model.modelReset.connect(self._fit_preset_picker)
        self.preset_button = QPushButton("Edit preset…")
        set_icon(self.preset_button, "sliders-horizontal")
        self.addWidget(self.preset_button)
        self.preset_quality_label = ElidedLabel()
        self.preset_quality_label.setObjectName("presetQuality")
        self.preset_quality_label.setContentsMargins(6, 0, 6, 0)
        self.preset_quality_label.setSizePolicy(
            QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred
        )
        self.addWidget(self.preset_quality_label)
        self.settings_button = QPushButton("Settings")
        set_icon(self.settings_button, "settings")
        self.settings_button.setToolTip("Settings (Ctrl+,)")
        self.addWidget(self.settings_button)
        self.set_loading(None)

    def _fit_preset_picker(self, *_args) -> None:
        combo = self.preset_combo
        metrics = combo.fontMetrics()
        longest = max(
            (
                metrics.horizontalAdvance(combo.itemText(i))
                for i in range(combo.count())
            ),
            default=0,
        )
        combo.setMinimumWidth(longest + PICKER_ARROW_ROOM)

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.StyleChange, QEvent.Type.FontChange):
            self._fit_preset_picker()

    @property
    def loading(self) -> bool:
        """True while the loading indicator shows."""
        return self._loading_bar_action.isVisible()

    def set_loading(self, text: str | None) -> None:
        """Show the loading indicator with ``text``, or hide it (None)."""
        self.loading_label.setText(text or "")
        self._loading_bar_action.setVisible(text is not None)
        self._loading_label_action.setVisible(text is not None)
