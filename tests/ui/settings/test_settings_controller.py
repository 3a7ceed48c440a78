"""The settings: the dialog saves typed settings, refuses bad ones, switches the theme live."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QDialogButtonBox

from app.core.settings import AppSettings, load_settings
from app.core.text.markdown_html import DARK_THEME, LIGHT_THEME
from app.ui.application import load_settings_or_defaults
from app.ui.common.theme import apply_theme, is_dark
from app.ui.settings.settings_dialog import SettingsDialog


@pytest.fixture
def restore_theme(qapp):
    yield
    apply_theme(qapp, "system")


def test_the_settings_dialog_saves_typed_settings(qtbot, window, restore_theme):
    window.settings_controller.open_dialog()
    dialog = window.findChild(SettingsDialog)
    assert dialog.memory_cap.value() == 75 and dialog.safety.value() == 0.6
    dialog.memory_cap.setValue(60)
    dialog.safety.setValue(0.5)
    dialog.reserve.setValue(1.5)
    dialog.theme.setCurrentIndex(dialog.theme.findData("dark"))
    dialog.default_preset.setCurrentIndex(dialog.default_preset.findData("code"))
    dialog.cache_cap.setValue(0)
    assert not dialog.server_enabled.isChecked()  # off unless asked for
    dialog.server_port.setValue(9123)
    with qtbot.waitSignal(window.settings_controller.settings_changed, timeout=2000):
        dialog.buttons.button(QDialogButtonBox.StandardButton.Ok).click()
    saved = load_settings()
    assert (saved.server_enabled, saved.server_port) == (False, 9123)
    assert (saved.memory_cap_fraction, saved.safety_factor) == (0.6, 0.5)
    assert saved.reserve_bytes == int(1.5 * 1024**3)
    assert (saved.theme, saved.default_preset, saved.prefix_cache_disk_cap_bytes) == (
        "dark",
        "code",
        0,
    )
    assert saved.last_model == window.models.info.folder  # kept, not reset
    assert window.settings_controller.settings == saved
    assert window.memory_gauge.sparkline.cap == 0.6
    qtbot.waitUntil(lambda: is_dark(window.palette()), timeout=2000)
    window.current.new_chat()
    assert window.current.preset().name == "code"


def test_the_settings_dialog_refuses_invalid_values_in_words(qtbot, window):
    dialog = SettingsDialog(window.settings_controller.settings, ["chat"], window)
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


def _lightness(colour) -> int:
    return colour.lightness()


def _background_and_text(view) -> tuple[int, int]:
    """The lightness of a message's background (its median pixel) and of its text.

    The text is the pixel furthest from the background: the darkest one on a light
    background, the lightest on a dark one.
    """
    canvas = view.window().chat_view.scroll_area.widget()
    body = QRect(view.body.mapTo(canvas, QPoint(0, 0)), view.body.size())
    image = canvas.grab(body).toImage()
    values = sorted(
        image.pixelColor(x, y).lightness()
        for x in range(image.width())
        for y in range(image.height())
    )
    background = values[len(values) // 2]
    return background, values[0] if background > 128 else values[-1]


def test_switching_the_theme_live_repaints_every_message(
    qtbot, window, send, restore_theme
):
    window.settings_controller.apply(
        window.settings_controller.settings.with_changes(theme="light")
    )
    send(window, "Show me **bold** words in both themes")
    views = window.chat_view.message_views()
    assert all(view._theme == LIGHT_THEME for view in views)
    background, text = _background_and_text(views[0])
    assert background > 200 and text < 100  # dark text on a light background

    window.settings_controller.apply(
        window.settings_controller.settings.with_changes(theme="dark")
    )
    qtbot.waitUntil(lambda: is_dark(window.palette()), timeout=2000)
    views = window.chat_view.message_views()
    assert all(view._theme == DARK_THEME for view in views)
    for view in views:
        palette = view.body.palette()
        assert _lightness(palette.color(QPalette.ColorRole.Text)) > 180
        background, text = _background_and_text(view)
        assert background < 80 and text > 150, (background, text)
    canvas = window.chat_view.scroll_area.widget().grab().toImage()
    assert canvas.pixelColor(5, canvas.height() - 5).lightness() < 80
