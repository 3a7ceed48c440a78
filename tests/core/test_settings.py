"""App settings are typed, validated with messages naming the key, and kept in TOML."""

from __future__ import annotations

import pytest

from app.core.budget.memory_budget import BudgetSettings
from app.core.errors import SettingsError
from app.core.settings import (
    DEFAULT_THEME,
    AppSettings,
    load_settings,
    save_settings,
)


def test_defaults_without_a_file(swapless_home):
    settings = load_settings()
    assert settings == AppSettings()
    assert settings.theme == DEFAULT_THEME == "system"
    assert settings.default_preset == "chat"
    assert settings.budget() == BudgetSettings()
    assert not (swapless_home / "settings.toml").exists()


def test_round_trip_through_the_file(swapless_home):
    settings = AppSettings().with_changes(
        memory_cap_fraction=0.5,
        reserve_bytes=3 * 1024**3,
        safety_factor=0.4,
        theme="dark",
        default_preset="code",
        prefix_cache_disk_cap_bytes=0,
        model_folders=["/models/a", "/models/b", "/models/a"],
        last_model='/models/with "quotes" and \\ slash',
    )
    path = save_settings(settings)
    assert path == swapless_home / "settings.toml"
    loaded = load_settings()
    assert loaded == settings
    assert loaded.model_folders == ("/models/a", "/models/b")  # repeats dropped
    assert loaded.budget() == BudgetSettings(0.5, 3 * 1024**3, 0.4)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"theme": "purple"},
            "'theme' must be one of system, light, dark, got 'purple'",
        ),
        (
            {"memory_cap_fraction": 0.99},
            "'memory_cap_fraction' must be between 0.05 and 0.95",
        ),
        ({"safety_factor": "high"}, "'safety_factor' must be a number"),
        ({"reserve_bytes": 1.5}, "'reserve_bytes' must be a whole number of bytes"),
        (
            {"prefix_cache_disk_cap_bytes": -1},
            "'prefix_cache_disk_cap_bytes' must be between 0",
        ),
        ({"default_preset": "Chat!"}, "'default_preset' must be a preset name"),
        ({"model_folders": "/one/folder"}, "'model_folders' must be a list of folders"),
        ({"last_model": 3}, "'last_model' must be a folder path as text"),
    ],
)
def test_invalid_values_name_the_key_and_the_allowed_values(change, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
        AppSettings().with_changes(**change)


def test_unknown_keys_are_refused_with_the_known_ones(swapless_home):
    (swapless_home / "settings.toml").write_text('theme = "dark"\ncolour = "blue"\n')
    with pytest.raises(SettingsError) as error:
        load_settings()
    text = str(error.value)
    assert "settings.toml" in text and "unknown key 'colour'" in text
    assert "memory_cap_fraction" in text and "theme" in text


def test_a_file_that_is_not_toml_is_refused_in_words(swapless_home):
    (swapless_home / "settings.toml").write_text("theme = = dark")
    with pytest.raises(SettingsError, match="settings.toml is not valid TOML"):
        load_settings()


def test_control_characters_are_written_as_valid_toml(swapless_home):
    settings = AppSettings().with_changes(last_model="/m/form\x0cfeed\x1b[0m\x7f")
    save_settings(settings)
    assert load_settings() == settings


def test_a_partial_file_keeps_the_other_defaults(swapless_home):
    (swapless_home / "settings.toml").write_text("safety_factor = 0.5\n")
    assert load_settings() == AppSettings(safety_factor=0.5)
