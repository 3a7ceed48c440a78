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
from app.core.presets import get_preset

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
