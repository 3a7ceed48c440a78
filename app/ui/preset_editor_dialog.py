"""The preset editor: change any setting of a preset, checked as you type.

The form is built from the `Preset` dataclass itself (a check box per flag, a list per
setting with fixed choices, a text field for the rest), so a setting added to presets
shows up here without a change. Every edit is validated by the core
(`preset_from_dict`): its `SettingsError`, which names the key and the allowed values,
is shown under the form, and the buttons stay off until the preset is valid. The result
can be applied to the shown conversation (saved with it) and/or saved as a user preset.
"""

from __future__ import annotations

from dataclasses import fields

from PySide6.QtCore import Signal
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
from app.core.generation_settings import VALID_KV_BITS, VALID_KV_GROUPS
from app.core.presets import (
    VALID_SUMMARY_MODES,
    VALID_TRIM_METHODS,
    Preset,
    builtin_presets,
    preset_from_dict,
    save_user_preset,
)

CHOICES = {
    "kv_bits": VALID_KV_BITS,
    "kv_group": VALID_KV_GROUPS,
    "trim_method": VALID_TRIM_METHODS,
    "summary_mode": VALID_SUMMARY_MODES,
}
LABELS = {
    "kv_bits": "KV precision (bits)",
    "kv_group": "KV group size",
    "quantized_kv_start": "Quantize KV after (tokens)",
    "max_context": "Max context (tokens)",
    "keep_ratio": "Share kept when trimming",
    "auto_trim": "Trim automatically",
    "trim_method": "Trim method",
    "summary_mode": "Summaries written",
    "summary_max_tokens": "Summary length (tokens)",
    "segmenting": "Read long documents in segments",
    "segment_tokens": "Segment size (tokens)",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "max_tokens": "Max reply length (tokens)",
    "system_prompt": "System prompt",
}


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
    """

    preset_applied = Signal(object)
    preset_saved = Signal(object)

    def __init__(self, preset: Preset, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Edit preset")
        self.setMinimumSize(560, 620)
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
            editor = self._editor(name, field.type, value)
            self.editors[name] = editor
            label = LABELS.get(name, name.replace("_", " ").capitalize())
            if isinstance(editor, QCheckBox):
                editor.setText(label)
                form.addRow("", editor)
            else:
                form.addRow(label, editor)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(form_widget)
        layout.addWidget(scroll, 1)

        self.error_label = QLabel()
        self.error_label.setObjectName("presetError")
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #cf222e;")
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
            editor = QCheckBox()
            editor.setChecked(bool(value))
            editor.toggled.connect(self.validate)
            return editor
        if name in CHOICES:
            editor = QComboBox()
            for choice in CHOICES[name]:
                editor.addItem(str(choice), choice)
            editor.setCurrentIndex(max(0, editor.findData(value)))
            editor.currentIndexChanged.connect(self.validate)
            return editor
        if name == "system_prompt":
            editor = QPlainTextEdit(str(value))
            editor.setMaximumHeight(110)
            editor.textChanged.connect(self.validate)
            return editor
        editor = QLineEdit(str(value))
        editor.textChanged.connect(self.validate)
        return editor

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
        data = {}
        for name, editor in self.editors.items():
            kind = self._fields[name].type
            if isinstance(editor, QCheckBox):
                data[name] = editor.isChecked()
            elif isinstance(editor, QComboBox):
                data[name] = editor.currentData()
            elif isinstance(editor, QPlainTextEdit):
                data[name] = editor.toPlainText()
            else:
                data[name] = _parse(editor.text(), kind)
        return data

    @property
    def preset(self) -> Preset | None:
        """The valid preset in the form, or None while it is invalid."""
        return self._preset

    def validate(self, *_args) -> bool:
        """Check the form; show the core's message when it is refused."""
        data = self.values()
        try:
            self._preset = preset_from_dict(str(data["name"]), data)
        except SettingsError as exc:
            self._preset = None
            self.error_label.setStyleSheet("color: #cf222e;")
            self.error_label.setText(str(exc))
            self.error_label.show()
        else:
            self.error_label.hide()
        valid = self._preset is not None
        self.apply_button.setEnabled(valid)
        self.save_button.setEnabled(valid)
        return valid

    def _on_save_button_clicked(self) -> None:
        if not self.validate():
            return
        try:
            save_user_preset(self._preset)
        except SettingsError as exc:
            self.error_label.setText(str(exc))
            self.error_label.show()
            return
        self.preset_saved.emit(self._preset)
        self.error_label.setText(f"Saved preset “{self._preset.name}”.")
        self.error_label.setStyleSheet("color: #2da44e;")
        self.error_label.show()

    def _on_apply_button_clicked(self) -> None:
        if not self.validate():
            return
        self.preset_applied.emit(self._preset)
        self.accept()
