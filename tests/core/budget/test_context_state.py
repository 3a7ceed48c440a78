"""The context meter's numbers come from the budget, with the preset's bits and group."""

from __future__ import annotations

import pytest

from app.core.budget import BudgetSettings, DeviceBudget, read_geometry
from app.core.budget.context_state import (
    context_state,
    effective_limit,
    estimate_kv_bytes,
    next_trim_at,
)
from app.core.presets.presets import get_preset

# The tiny shape: 2 layers, 2 KV heads, head_dim 128; float32 on the CPU backend.
LAYERS, KV_HEADS, HEAD_DIM, ACT = 2, 2, 128, 4


@pytest.fixture
def budget(tiny_model_dir):
    return DeviceBudget(
        total_memory=16 * 2**30,
        weights_bytes=10 * 2**20,
        geometry=read_geometry(tiny_model_dir),
        settings=BudgetSettings(),
        act_dtype_bytes=ACT,
    )


def by_hand(tokens: int, bits: int, group: int) -> int:
    """2 (K, V) × layers × heads × head_dim × bytes per element, 256-token steps."""
    rounded = -(-tokens // 256) * 256
    per_element = ACT if bits == 16 else bits / 8 + 2 * ACT / group
    return int(2 * LAYERS * KV_HEADS * HEAD_DIM * per_element * rounded)


@pytest.mark.parametrize("bits", [8, 4])
def test_each_group_gives_its_own_bytes(budget, bits):
    sizes = {g: estimate_kv_bytes(budget, 1000, bits, g) for g in (32, 64, 128)}
    assert sizes == {g: by_hand(1000, bits, g) for g in (32, 64, 128)}
    assert sizes[32] > sizes[64] > sizes[128]


def test_sixteen_bits_ignore_the_group_and_nothing_without_a_budget(budget):
    assert estimate_kv_bytes(budget, 300, 16, 32) == by_hand(300, 16, 64)
    assert estimate_kv_bytes(budget, 300, 16, 128) == by_hand(300, 16, 64)
    assert estimate_kv_bytes(None, 300, 8, 64) == 0
    assert estimate_kv_bytes(budget, 0, 8, 64) == 0


def test_limits_and_the_next_trim_mark():
    assert effective_limit(4096, 8, 64, None) == 4096
    assert effective_limit(4096, 8, 64, lambda bits, group: 1000) == 1000
    assert effective_limit(512, 8, 64, lambda bits, group: None) == 512
    assert next_trim_at(2048, 16, "normal") == 2048 - 16
    assert next_trim_at(2048, 16, "warning") < 2048 - 16


def test_a_state_without_a_cache_is_an_estimate_at_the_preset_precision(budget):
    preset = get_preset("chat").with_changes(kv_bits=8, kv_group=32, max_tokens=64)
    state = context_state(
        conversation_id=7,
        preset=preset,
        limit=2048,
        cached_tokens=0,
        cached_kv_bytes=0,
        prompt_tokens=lambda: 500,
        trims=2,
        pressure="normal",
        budget=budget,
    )
    assert (state.tokens, state.exact, state.kv_group) == (500, False, 32)
    assert state.kv_bytes == by_hand(500, 8, 32)
    assert state.next_trim_at == 2048 - 64 and state.trims == 2
    live = context_state(
        conversation_id=7,
        preset=preset,
        limit=2048,
        cached_tokens=600,
        cached_kv_bytes=12345,
        prompt_tokens=lambda: pytest.fail("a live cache needs no counting"),
        trims=2,
        pressure="normal",
        budget=budget,
    )
    assert (live.tokens, live.kv_bytes, live.exact) == (600, 12345, True)


def test_an_aged_preset_is_estimated_tier_by_tier(budget):
    from app.core.budget.aged_budget import aged_kv_bytes_at

    preset = get_preset("chat").with_changes(
        kv_bits=4, kv_recent_tokens=256, kv_band_tokens=256, kv_age_block=64
    )
    state = context_state(
        conversation_id=None,
        preset=preset,
        limit=4096,
        cached_tokens=0,
        cached_kv_bytes=0,
        prompt_tokens=lambda: 1000,
        trims=0,
        pressure="normal",
        budget=budget,
    )
    assert not state.exact
    assert state.kv_bytes == aged_kv_bytes_at(
        budget.geometry, 1000, preset.kv_aging, 64, act_dtype_bytes=ACT
    )
    assert [(t.name, t.tokens, t.precision) for t in state.kv_tiers] == [
        ("recent", 296, "exact"),
        ("band", 256, "8-bit"),
        ("floor", 448, "4-bit"),
    ]
    assert sum(t.nbytes for t in state.kv_tiers) == state.kv_bytes
    assert state.kv_aging == "256 exact, 256 at 8-bit, then 4-bit"


def test_a_live_aged_cache_reports_its_measured_tiers(budget):
    from app.core.engine.events import LayerGroup

    preset = get_preset("chat").with_changes(kv_recent_tokens=1024)
    layers = (
        LayerGroup("full_attention", 2, 16, None, "float32", 900, 100, 16, "recent"),
        LayerGroup("full_attention", 2, 8, 64, "float32", 300, 50, 8, "floor"),
    )
    state = context_state(
        conversation_id=3,
        preset=preset,
        limit=4096,
        cached_tokens=150,
        cached_kv_bytes=1200,
        prompt_tokens=lambda: pytest.fail("a live cache is measured, not estimated"),
        trims=0,
        pressure="normal",
        budget=budget,
        cached_layers=layers,
    )
    assert state.exact and state.kv_bytes == 1200
    assert [(t.name, t.tokens, t.nbytes) for t in state.kv_tiers] == [
        ("recent", 100, 900),
        ("floor", 50, 300),
    ]


def test_the_device_limit_of_an_aged_preset_counts_its_tiers(budget):
    aging = get_preset("chat").with_changes(kv_recent_tokens=1024).kv_aging
    asked = []

    def device_limit(bits, group, aging=None):
        asked.append(aging)
        return budget.max_context(bits, group, aging)

    limit = effective_limit(10**9, 8, 64, device_limit, aging)
    assert asked == [aging]
    assert limit == budget.max_context(8, 64, aging) < budget.max_context(8, 64)
