"""The settings dialog: memory budget, theme, default preset, prefix-cache disk cap, server.

Values are edited in the units people think in (percent of RAM, GiB) and checked by
`AppSettings` itself, so the dialog can never save what the settings file would refuse;
a refusal is shown under the form and OK stays disabled until it is fixed.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.budget.memory_budget import (
    MEMORY_CAP_RANGE,
    SAFETY_FACTOR_RANGE,
    SETTING_EXPLANATIONS,
)
from app.core.errors import SettingsError
from app.core.settings import GIB, SERVER_PORT_RANGE, VALID_THEMES, AppSettings
from app.ui.common.theme import error_colour

THEME_LABELS = {"system": "Follow the system", "light": "Light", "dark": "Dark"}


def _help(text: str) -> QLabel:
    label = QLabel(text[0].upper() + text[1:] + ".")
    label.setWordWrap(True)
    label.setStyleSheet("color: palette(placeholder-text);")
    return label


class SettingsDialog(QDialog):
    """Edit `AppSettings`; emits `settings_accepted` with the new value on OK.

    Args:
        settings: The current settings.
        preset_names: Presets to offer as the default.
        parent: The window.
    """

    settings_accepted = Signal(object)
    tools_requested = Signal()

    def __init__(
        self,
        settings: AppSettings,
        preset_names: list[str],
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.setMinimumWidth(520)
        self._base = settings
        layout = QVBoxLayout(self)
        form = QFormLayout()

        self.memory_cap = QDoubleSpinBox()
        self.memory_cap.setRange(MEMORY_CAP_RANGE[0] * 100, MEMORY_CAP_RANGE[1] * 100)
        self.memory_cap.setDecimals(0)
        self.memory_cap.setSuffix(" % of RAM")
        self.memory_cap.setValue(settings.memory_cap_fraction * 100)
        form.addRow("Memory cap", self.memory_cap)
        form.addRow("", _help(SETTING_EXPLANATIONS["memory_cap_fraction"]))

        self.reserve = QDoubleSpinBox()
        self.reserve.setRange(0, 1024)
        self.reserve.setDecimals(1)
        self.reserve.setSingleStep(0.5)
        self.reserve.setSuffix(" GiB")
        self.reserve.setValue(settings.reserve_bytes / GIB)
        form.addRow("Reserve", self.reserve)
        form.addRow("", _help(SETTING_EXPLANATIONS["reserve_bytes"]))

        self.safety = QDoubleSpinBox()
        self.safety.setRange(*SAFETY_FACTOR_RANGE)
        self.safety.setDecimals(2)
        self.safety.setSingleStep(0.05)
        self.safety.setValue(settings.safety_factor)
        form.addRow("Safety factor", self.safety)
        form.addRow("", _help(SETTING_EXPLANATIONS["safety_factor"]))

        self.theme = QComboBox()
        for name in VALID_THEMES:
            self.theme.addItem(THEME_LABELS[name], name)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.theme)))
        form.addRow("Theme", self.theme)

        self.default_preset = QComboBox()
        for name in preset_names:
            self.default_preset.addItem(name, name)
        if self.default_preset.findData(settings.default_preset) < 0:
            self.default_preset.addItem(
                settings.default_preset, settings.default_preset
            )
        self.default_preset.setCurrentIndex(
            self.default_preset.findData(settings.default_preset)
        )
        form.addRow("Preset of new chats", self.default_preset)

        self.cache_cap = QDoubleSpinBox()
        self.cache_cap.setRange(0, 1024)
        self.cache_cap.setDecimals(1)
        self.cache_cap.setSuffix(" GiB")
        self.cache_cap.setSpecialValueText("Off")
        self.cache_cap.setValue(settings.prefix_cache_disk_cap_bytes / GIB)
        form.addRow("Prefix cache on disk", self.cache_cap)
        form.addRow(
            "",
            _help(
                "disk the saved KV caches of recent conversations may use, so they "
                "continue without reading their whole history again; 0 turns it off"
            ),
        )

        self.server_enabled = QCheckBox("Run the local server")
        self.server_enabled.setChecked(settings.server_enabled)
        self.server_port = QSpinBox()
        self.server_port.setRange(*SERVER_PORT_RANGE)
        self.server_port.setValue(settings.server_port)
        self.server_port.setPrefix("port ")
        server_row = QWidget()
        server_layout = QHBoxLayout(server_row)
        server_layout.setContentsMargins(0, 0, 0, 0)
        server_layout.addWidget(self.server_enabled)
        server_layout.addWidget(self.server_port)
        server_layout.addStretch(1)
        form.addRow("Local server", server_row)
        form.addRow(
            "",
            _help(
                "an OpenAI-compatible API on this computer only (127.0.0.1) for "
                "editors, agents and scripts; it answers with the loaded model, inside "
                "the same memory budget, and trims long histories like a chat"
            ),
        )
        self.tools_button = QPushButton("Tool servers (MCP)…")
        self.tools_button.clicked.connect(self.tools_requested)
        form.addRow("Tools", self.tools_button)
        form.addRow(
            "",
            _help(
                "servers (MCP) whose tools the model may use, with your consent; "
                "none at first"
            ),
        )
        layout.addLayout(form)

        self.error_label = QLabel()
        self.error_label.setObjectName("settingsError")
        self.error_label.setWordWrap(True)
        self.error_label.hide()
        layout.addWidget(self.error_label)
        self.buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        self.buttons.accepted.connect(self._on_buttons_accepted)
        self.buttons.rejected.connect(self.reject)
        layout.addWidget(self.buttons)
        for spin in (self.memory_cap, self.reserve, self.safety, self.cache_cap):
            spin.valueChanged.connect(self._validate)
        self.server_port.valueChanged.connect(self._validate)
        self.server_enabled.toggled.connect(self._validate)
        self.theme.currentIndexChanged.connect(self._validate)
        self.default_preset.currentIndexChanged.connect(self._validate)

    def values(self) -> dict:
        """The form's values in `AppSettings` units."""
        return {
            "memory_cap_fraction": round(self.memory_cap.value() / 100, 4),
            "reserve_bytes": int(round(self.reserve.value() * GIB)),
            "safety_factor": round(self.safety.value(), 4),
            "theme": self.theme.currentData(),
            "default_preset": self.default_preset.currentData(),
            "prefix_cache_disk_cap_bytes": int(round(self.cache_cap.value() * GIB)),
            "server_enabled": self.server_enabled.isChecked(),
            "server_port": self.server_port.value(),
        }

    def result_settings(self) -> AppSettings:
        """The edited settings.

        Raises:
            SettingsError: A value the settings refuse (the message names it).
        """
        return self._base.with_changes(**self.values())

    def _validate(self, *_args) -> bool:
        try:
            self.result_settings()
        except SettingsError as exc:
            self.error_label.setText(str(exc))
            # Coloured when shown, for the theme in use now.
            self.error_label.setStyleSheet(f"color: {error_colour()};")
            self.error_label.show()
            self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(False)
            return False
        self.error_label.hide()
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(True)
        return True

    def _on_buttons_accepted(self) -> None:
        if not self._validate():
            return
        self.settings_accepted.emit(self.result_settings())
        self.accept()
