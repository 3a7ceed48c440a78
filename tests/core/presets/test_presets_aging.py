"""Presets can age their KV cache; the aging keys are validated and optional in files."""

from __future__ import annotations

import pytest

from app.core.errors import SettingsError
from app.core.presets.generation_settings import KVAging
from app.core.presets.presets import (
    get_preset,
    preset_from_dict,
    repaired_preset,
    save_user_preset,
)

AGING_KEYS = (
    "kv_recent_tokens",
    "kv_band_tokens",
    "kv_band_key_bits",
    "kv_band_value_bits",
    "kv_floor_value_bits",
    "kv_age_block",
    "kv_rotate_keys",
)


def test_a_preset_without_the_aging_keys_loads_with_aging_off():
    # What version 0.1 wrote (a user preset file, a stored conversation's settings).
    old = {k: v for k, v in get_preset("chat").to_dict().items() if k not in AGING_KEYS}
    preset = preset_from_dict("old", old)
    assert preset.kv_aging is None
    assert preset.kv_settings().aging is None
    _, notes = repaired_preset("chat", old)
    assert notes == []


def test_the_aging_keys_build_the_tiers():
    preset = get_preset("long-document").with_changes(
        kv_recent_tokens=512,
        kv_band_tokens=2048,
        kv_band_key_bits=8,
        kv_band_value_bits=4,
    )
    kv = preset.kv_settings()
    assert kv.aging == KVAging(
        recent_tokens=512,
        band_tokens=2048,
        band_key_bits=8,
        band_value_bits=4,
        floor_key_bits=4,
        floor_value_bits=4,
    )
    assert (kv.bits, kv.group_size) == (4, preset.kv_group)
    values = preset.with_changes(kv_floor_value_bits=2).kv_settings().aging
    assert (values.floor_key_bits, values.floor_value_bits) == (4, 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"kv_recent_tokens": 1000},
            "kv_recent_tokens must be a multiple of kv_age_block \\(256\\), got 1000",
        ),
        ({"kv_band_key_bits": 7}, "kv_band_key_bits must be one of 8, 6, 5, 4, 3, 2"),
        ({"kv_age_block": 100}, "kv_age_block must be one of 64, 128, 256, 512"),
        (
            {"kv_recent_tokens": 512, "kv_bits": 16},
            "needs kv_bits 8 or 4 for the oldest tokens' keys, got 16",
        ),
        (
            {"kv_recent_tokens": 512, "kv_band_tokens": 512, "kv_band_key_bits": 4},
            "cannot be more precise than the band",
        ),
        ({"kv_rotate_keys": "yes"}, "kv_rotate_keys must be true or false"),
    ],
)
def test_invalid_aging_names_the_key(change, message):
    with pytest.raises(SettingsError, match=message):
        get_preset("chat").with_changes(**change)


def test_an_aged_user_preset_round_trips(swapless_home):
    mine = get_preset("chat").with_changes(
        name="aged", kv_recent_tokens=1024, kv_rotate_keys=True
    )
    save_user_preset(mine)
    assert get_preset("aged") == mine
    assert get_preset("aged").kv_settings().aging.rotate_keys


def test_an_imported_aging_that_does_not_fit_together_falls_back_with_a_note():
    data = {**get_preset("chat").to_dict(), "kv_recent_tokens": 300}
    preset, notes = repaired_preset("chat", data)
    assert preset.kv_aging is None
    assert len(notes) == 1 and "kv_recent_tokens must be a multiple" in notes[0]
