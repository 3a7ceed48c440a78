"""Presets are typed, validated, and user presets live under SWAPLESS_HOME."""

from __future__ import annotations

import pytest
import tomli_w

from app.core.errors import SettingsError
from app.core.presets.presets import (
    all_presets,
    builtin_presets,
    get_preset,
    save_user_preset,
    skipped_user_presets,
    user_presets,
)


def test_builtin_presets_match_the_documented_intent():
    presets = builtin_presets()
    assert list(presets) == ["chat", "long-document", "code", "precise"]
    chat = presets["chat"]
    assert (chat.kv_bits, chat.max_context, chat.keep_ratio, chat.summary_mode) == (
        8,
        10000,
        0.6,
        "model",
    )
    assert presets["long-document"].kv_bits == 4 and presets["long-document"].segmenting
    assert presets["long-document"].max_context > chat.max_context
    assert presets["code"].kv_bits == 8 and presets["code"].keep_ratio == 0.7
    assert presets["code"].temperature < chat.temperature
    precise = presets["precise"]
    assert (precise.kv_bits, precise.trim_method, precise.temperature) == (
        16,
        "rebuild",
        0.0,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kv_group": 16}, "kv_group must be one of 32, 64, 128, got 16"),
        ({"kv_bits": 3}, "kv_bits must be one of 16, 8, 4, got 3"),
        ({"keep_ratio": 1.5}, "keep_ratio must be between 0.1 and 0.9, got 1.5"),
        ({"trim_method": "cut"}, "trim_method must be one of splice, rebuild"),
        ({"auto_trim": "yes"}, "auto_trim must be true or false"),
    ],
)
def test_invalid_values_name_the_key_and_the_allowed_values(change, message):
    with pytest.raises(SettingsError, match=message):
        get_preset("chat").with_changes(**change)


def test_unknown_keys_are_rejected(swapless_home):
    (swapless_home / "presets").mkdir(exist_ok=True)
    (swapless_home / "presets" / "mine.toml").write_text('colour = "blue"\n')
    assert user_presets() == {}  # skipped, with the reason:
    (notice,) = skipped_user_presets()
    assert "unknown key 'colour'; allowed keys are description" in notice


@pytest.mark.parametrize(
    "content",
    [
        'system_prompt = "\\q"\n',  # invalid escape: what hand escaping produced
        "a = " + "[" * 100_000 + "]" * 100_000 + "\n",  # RecursionError before
        "\xff\xfe not text",
        "kv_bits = 5\n",  # a bad value
    ],
    ids=["invalid-toml", "deep-nesting", "not-utf8", "bad-value"],
)
def test_one_unreadable_user_preset_never_stops_the_others(
    swapless_home, content, caplog
):
    save_user_preset(get_preset("code").with_changes(name="good"))
    (swapless_home / "presets" / "broken.toml").write_bytes(content.encode("latin-1"))
    assert get_preset("chat") == builtin_presets()["chat"]
    assert set(all_presets()) == {*builtin_presets(), "good"}
    (notice,) = skipped_user_presets()
    assert "broken.toml" in notice and "skipped" in notice
    assert len(notice.splitlines()) == 1


@pytest.mark.parametrize(
    "text", ["form\x0cfeed", "esc\x1b[31m", "nul\x00", "\x7f\u2028"]
)
def test_control_characters_in_a_system_prompt_survive_saving(swapless_home, text):
    mine = get_preset("chat").with_changes(name="mine", system_prompt=f"{text} end")
    save_user_preset(mine)
    assert skipped_user_presets() == []
    assert get_preset("mine") == mine


def test_a_user_preset_named_like_a_builtin_is_not_used_and_said(swapless_home):
    (swapless_home / "presets").mkdir(exist_ok=True)
    table = get_preset("chat").with_changes(description="mine").to_dict()
    del table["name"]
    (swapless_home / "presets" / "chat.toml").write_text(
        tomli_w.dumps({k: v for k, v in table.items() if v is not None})
    )
    assert all_presets()["chat"] == builtin_presets()["chat"]
    assert any("name of a built-in preset" in n for n in skipped_user_presets())


def test_user_presets_round_trip_and_cannot_shadow_builtins(swapless_home):
    mine = get_preset("code").with_changes(
        name="mine", kv_bits=4, system_prompt='Say "hi"\nthen stop.'
    )
    path = save_user_preset(mine)
    assert path.parent == swapless_home / "presets"
    assert get_preset("mine") == mine
    assert "mine" in all_presets()
    with pytest.raises(SettingsError, match="built-in"):
        save_user_preset(get_preset("chat"))
    with pytest.raises(
        SettingsError, match="unknown preset 'nope'; choose one of chat"
    ):
        get_preset("nope")


def test_every_builtin_preset_states_its_thinking_choice():
    import tomllib

    from app.core.files.paths import resources_dir
    from app.core.presets.presets import THINKING_KEYS, preset_from_dict

    data = tomllib.loads((resources_dir() / "presets.toml").read_text())
    for name, table in data.items():
        assert all(key in table for key in THINKING_KEYS), name
        preset = preset_from_dict(name, table)
        settings = preset.thinking_settings()
        assert settings.budget < preset.max_tokens or settings.budget == 0, name
    assert data["long-document"]["thinking"] is False


def test_a_preset_without_thinking_keys_gets_the_defaults_and_bad_ones_are_refused():
    from app.core.presets.presets import THINKING_KEYS, preset_from_dict

    chat = builtin_presets()["chat"].to_dict()
    base = {k: v for k, v in chat.items() if k not in THINKING_KEYS}
    preset = preset_from_dict("mine", base)
    assert preset.thinking and preset.thinking_budget == 0
    with pytest.raises(SettingsError, match="thinking_budget"):
        preset_from_dict("mine", {**base, "thinking_budget": -1})
    with pytest.raises(SettingsError, match="reasoning_effort"):
        preset_from_dict("mine", {**base, "reasoning_effort": "max"})
