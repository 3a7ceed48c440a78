"""The settings dialog and the preset editor: validation in words, saved for real."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from app.core.presets import user_presets
from app.core.settings import AppSettings, load_settings
from app.ui.application import load_settings_or_defaults
from app.ui.preset_editor_dialog import PresetEditorDialog
from app.ui.settings_dialog import SettingsDialog
from app.ui.theme import apply_theme, is_dark


@pytest.fixture
def restore_theme(qapp):
    yield
    apply_theme(qapp, "system")


def test_the_settings_dialog_saves_typed_settings(qtbot, window, restore_theme):
    window.open_settings()
    dialog = window.findChild(SettingsDialog)
    assert dialog.memory_cap.value() == 75 and dialog.safety.value() == 0.6
    dialog.memory_cap.setValue(60)
    dialog.safety.setValue(0.5)
    dialog.reserve.setValue(1.5)
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.default_preset.setCurrentIndex(dialog.default_preset.findData("code"))
    dialog.cache_cap.setValue(0)
    with qtbot.waitSignal(dialog.settings_accepted, timeout=2000):
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    saved = load_settings()
    assert (saved.memory_cap_fraction, saved.safety_factor) == (0.6, 0.5)
    assert saved.reserve_bytes == int(1.5 * 1024**3)
    assert (saved.theme, saved.default_preset, saved.prefix_cache_disk_cap_bytes) == (
        "dark",
        "code",
        0,
    )
    assert saved.last_model == window.model_info.folder  # kept, not reset
    assert window.settings == saved
    assert window.memory_gauge.sparkline.cap == 0.6
    qtbot.waitUntil(lambda: is_dark(window.palette()), timeout=2000)
    window.new_chat()
    assert window.current_preset.name == "code"


def test_the_settings_dialog_refuses_invalid_values_in_words(qtbot, window):
    dialog = SettingsDialog(window.settings, ["chat"], window)
    qtbot.addWidget(dialog)
    # A default preset outside the settings' rules (e.g. from a hand-edited file).
    dialog.default_preset.addItem("Not A Preset", "Not A Preset")
    dialog.default_preset.setCurrentIndex(dialog.default_preset.count() - 1)
    assert dialog.error_label.isVisibleTo(dialog)
    assert "default_preset" in dialog.error_label.text()
    assert not dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).isEnabled()
    dialog.default_preset.setCurrentIndex(0)
    assert not dialog.error_label.isVisibleTo(dialog)


def test_a_broken_settings_file_falls_back_to_the_defaults_with_a_message(
    swapless_home,
):
    (swapless_home / "settings.toml").write_text('theme = "purple"\n')
    settings, problem = load_settings_or_defaults()
    assert settings == AppSettings()
    assert "theme" in problem and "system, light, dark" in problem


def test_the_preset_editor_validates_with_the_core_messages(qtbot, window):
    window.open_preset_editor()
    dialog = window.findChild(PresetEditorDialog)
    assert dialog.editors["name"].text() == "my-chat"  # built-ins are saved as a copy
    dialog.set_value("max_context", "12x")
    assert "max_context must be a whole number, got '12x'" in dialog.error_label.text()
    assert not dialog.apply_button.isEnabled() and not dialog.save_button.isEnabled()
    dialog.set_value("max_context", "100")
    assert "max_context must be between 256 and 1048576" in dialog.error_label.text()
    dialog.set_value("max_context", "4096")
    dialog.set_value("keep_ratio", "1.5")
    assert (
        "keep_ratio must be between 0.1 and 0.9, got 1.5" in dialog.error_label.text()
    )
    dialog.set_value("keep_ratio", "0.5")
    dialog.set_value("name", "Bad Name")
    assert "lowercase letters" in dialog.error_label.text()
    dialog.set_value("name", "chat")
    assert dialog.preset is not None
    qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    assert "built-in preset" in dialog.error_label.text()
    dialog.set_value("name", "short-chats")
    dialog.set_value("kv_bits", "4")
    with qtbot.waitSignal(dialog.preset_saved, timeout=2000):
        qtbot.mouseClick(dialog.save_button, Qt.MouseButton.LeftButton)
    saved = user_presets()["short-chats"]
    assert (saved.max_context, saved.keep_ratio, saved.kv_bits) == (4096, 0.5, 4)
    assert window.preset_combo.findData("short-chats") >= 0


def test_a_preset_from_the_editor_applies_to_the_conversation(
    qtbot, window, store, send
):
    conversation_id, _ = send(window, "Before the change")
    window.open_preset_editor()
    dialog = window.findChild(PresetEditorDialog)
    dialog.set_value("kv_bits", "16")
    dialog.set_value("max_tokens", "8")
    with qtbot.waitSignal(window.preset_applied, timeout=10_000):
        qtbot.mouseClick(dialog.apply_button, Qt.MouseButton.LeftButton)
    settings = store.get_conversation(conversation_id).settings
    assert (settings["kv_bits"], settings["max_tokens"]) == (16, 8)
    _, report = send(window, "After the change")
    assert report.kv_bits == 16 and report.generated_tokens <= 8
    assert "(this conversation)" in window.preset_combo.currentText()
