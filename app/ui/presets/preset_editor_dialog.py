"""The preset editor: change any setting of a preset, checked as you type.

The form is built from the `Preset` dataclass itself (a check box per flag, a list per
setting with fixed choices, a text field for the rest), so a setting added to presets
shows up here without a change. Every edit is checked by `preset_form.check_form`,
which says what is wrong in the form's own words (and catches combinations that can
never work, such as a reply as long as the context); the field is marked, the words are
shown under the form, and the buttons stay off until the preset can be used. The
result can be applied to the shown conversation (saved with it) and/or saved as a user
preset. With a model loaded, a line under the form says what the chosen KV precision
(or trim) measured on that model, and warns — icon, colour, tooltip — when it fails a
threshold there; the words are the core's (`preset_quality`), as in the picker.
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.core.errors import SettingsError
from app.core.presets.generation_settings import (
    TIER_BITS,
    VALID_AGE_BLOCKS,
    VALID_KV_BITS,
    VALID_KV_GROUPS,
)
from app.core.presets.preset_form import LABELS, check_form
from app.core.presets.presets import (
    VALID_SUMMARY_MODES,
    VALID_TRIM_METHODS,
    Preset,
    builtin_presets,
    save_user_preset,
)
from app.core.quality.preset_quality import preset_quality
from app.ui.common.theme import error_colour, warning_colour

CHOICES = {
    "kv_bits": VALID_KV_BITS,
    "kv_group": VALID_KV_GROUPS,
    "trim_method": VALID_TRIM_METHODS,
    "summary_mode": VALID_SUMMARY_MODES,
    "kv_band_key_bits": TIER_BITS,
    "kv_band_value_bits": TIER_BITS,
    "kv_floor_value_bits": (0, *TIER_BITS),
    "kv_age_block": VALID_AGE_BLOCKS,
}
ERROR_COLOUR = "#cf222e"
WARNING_COLOUR = "#9a6700"
OK_COLOUR = "#2da44e"
PROBLEM_STYLE = f"border: 1px solid {ERROR_COLOUR};"


def _parse(text: str, kind: str):
    """Turn a text field into the field's type; leave bad text for the core to refuse."""
    text = text.strip()
    try:
        if kind == "int":
            return int(text.replace(",", "").replace("_", ""))
        if kind == "float":
            return float(text)
    except ValueError:
        return text
    return text


class PresetEditorDialog(QDialog):
    """Edit a preset.

    Args:
        preset: The preset to start from.
        parent: The window.
        quality: The loaded model's stored quality results (``Cell.key`` →
            `StoredResult`), or None when no model is loaded (no quality line then).
    """

    preset_applied = Signal(object)
    preset_saved = Signal(object)

    def __init__(
        self,
        preset: Preset,
        parent: QWidget | None = None,
        quality: dict | None = None,
        trained_context: int | None = None,
    ):
        super().__init__(parent)
        self._quality = quality
        self._trained_context = trained_context
        self.setWindowTitle("Edit preset")
        # Wide enough for the longest label beside its field without a scrollbar.
        self.setMinimumSize(720, 620)
        self._fields = {f.name: f for f in fields(Preset)}
        self.editors: dict[str, QWidget] = {}
        self._preset: Preset | None = preset
        builtin = preset.name in builtin_presets()

        layout = QVBoxLayout(self)
        intro = QLabel(
            "Changes apply from the conversation's next message. Built-in presets cannot "
            "be overwritten: save a copy under a new name."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        form_widget = QWidget()
        form = QFormLayout(form_widget)
        for name, field in self._fields.items():
            value = getattr(preset, name)
            if name == "name" and builtin:
                value = f"my-{preset.name}"
            editor = self._editor(name, str(field.type), value)
            self.editors[name] = editor
            label = LABELS.get(name, name.replace("_", " ").capitalize())
            if isinstance(editor, QCheckBox):
                editor.setText(label)
                form.addRow("", editor)
            else:
                form.addRow(label, editor)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        scroll.setWidget(form_widget)
        layout.addWidget(scroll, 1)

        self.quality_label = QLabel()
        self.quality_label.setObjectName("presetQualityLine")
        self.quality_label.setTextFormat(Qt.TextFormat.PlainText)
        self.quality_label.setWordWrap(True)
        self.quality_label.hide()
        layout.addWidget(self.quality_label)
        self.error_label = QLabel()
        self.error_label.setObjectName("presetError")
        self.error_label.setTextFormat(Qt.TextFormat.PlainText)
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        layout.addWidget(self.error_label)
        buttons = QHBoxLayout()
        self.save_button = QPushButton("Save as preset")
        self.save_button.setToolTip("Save under the name above, for any conversation")
        self.save_button.clicked.connect(self._on_save_button_clicked)
        buttons.addWidget(self.save_button)
        buttons.addStretch(1)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.reject)
        buttons.addWidget(self.cancel_button)
        self.apply_button = QPushButton("Use in this conversation")
        self.apply_button.setDefault(True)
        self.apply_button.clicked.connect(self._on_apply_button_clicked)
        buttons.addWidget(self.apply_button)
        layout.addLayout(buttons)
        self.validate()

    def _editor(self, name: str, kind: str, value) -> QWidget:
        if kind == "bool":
            check = QCheckBox()
            check.setChecked(bool(value))
            check.toggled.connect(self.validate)
            return check
        if name in CHOICES:
            combo = QComboBox()
            for choice in CHOICES[name]:
                combo.addItem(str(choice), choice)
            combo.setCurrentIndex(max(0, combo.findData(value)))
            combo.currentIndexChanged.connect(self.validate)
            return combo
        if name == "system_prompt":
            prompt = QPlainTextEdit(str(value))
            prompt.setMaximumHeight(110)
            prompt.textChanged.connect(self.validate)
            return prompt
        line = QLineEdit(str(value))
        # From its start: a long description showed only its end, cut mid-word.
        line.setCursorPosition(0)
        line.textChanged.connect(self.validate)
        return line

    def set_value(self, name: str, text: str) -> None:
        """Type ``text`` into a field (tests and scripts)."""
        editor = self.editors[name]
        if isinstance(editor, QPlainTextEdit):
            editor.setPlainText(text)
        elif isinstance(editor, QLineEdit):
            editor.setText(text)
        elif isinstance(editor, QComboBox):
            editor.setCurrentIndex(editor.findText(text))
        elif isinstance(editor, QCheckBox):
            editor.setChecked(text.lower() in ("1", "true", "yes", "on"))

    def values(self) -> dict:
        """The form as preset values (text left as text where it does not parse)."""
        data: dict[str, Any] = {}
        for name, editor in self.editors.items():
            kind = str(self._fields[name].type)
            if isinstance(editor, QCheckBox):
                data[name] = editor.isChecked()
            elif isinstance(editor, QComboBox):
                data[name] = editor.currentData()
            elif isinstance(editor, QPlainTextEdit):
                data[name] = editor.toPlainText()
            else:
                assert isinstance(editor, QLineEdit), "_editor's only other kind"
                data[name] = _parse(editor.text(), kind)
        return data

    @property
    def preset(self) -> Preset | None:
        """The valid preset in the form, or None while it is invalid."""
        return self._preset

    def validate(self, *_args) -> bool:
        """Check the form; mark the fields at fault and say why in the form's words."""
        self._preset, problems = check_form(self.values(), self._trained_context)
        marked = {p.field for p in problems if p.blocking}
        for name, editor in self.editors.items():
            editor.setStyleSheet(PROBLEM_STYLE if name in marked else "")
        if problems:
            # Per theme, so the sentence reads on light and dark alike.
            colour = error_colour() if self._preset is None else warning_colour()
            self._say("\n".join(p.message for p in problems), colour)
        else:
            self.error_label.hide()
        self._show_quality()
        valid = self._preset is not None
        self.apply_button.setEnabled(valid)
        self.save_button.setEnabled(valid)
        return valid

    def _show_quality(self) -> None:
        """Say what the form's KV precision and trim measured on the loaded model."""
        if self._quality is None:
            self.quality_label.hide()
            return
        values = self.values()
        compression = SimpleNamespace(
            kv_bits=values["kv_bits"],
            kv_group=values["kv_group"],
            trim_method=values["trim_method"],
        )
        name = values["name"] if isinstance(values["name"], str) else "this preset"
        (quality,) = preset_quality({name: compression}, self._quality)
        if quality.warning:
            self.quality_label.setText("⚠ " + quality.summary)
            self.quality_label.setStyleSheet(f"color: {ERROR_COLOUR};")
            self.quality_label.setToolTip(quality.warning)
        else:
            self.quality_label.setText(quality.summary)
            muted = self.palette().color(QPalette.ColorRole.PlaceholderText).name()
            self.quality_label.setStyleSheet(
                "" if quality.measured else f"color: {muted};"
            )
            self.quality_label.setToolTip("\n".join(quality.lines()))
        self.quality_label.show()

    def _say(self, text: str, colour: str) -> None:
        self.error_label.setStyleSheet(f"color: {colour};")
        self.error_label.setText(text)
        self.error_label.show()

    def _on_save_button_clicked(self) -> None:
        if not self.validate() or self._preset is None:  # valid: a preset was built
            return
        try:
            save_user_preset(self._preset)
        except SettingsError as exc:
            self._say(str(exc), ERROR_COLOUR)
            return
        self.preset_saved.emit(self._preset)
        self._say(f"Saved preset “{self._preset.name}”.", OK_COLOUR)

    def _on_apply_button_clicked(self) -> None:
        if not self.validate():
            return
        self.preset_applied.emit(self._preset)
        self.accept()
