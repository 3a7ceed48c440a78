"""The aged cache's budget: tokens and bytes per tier, limits, and the settings' rules."""

from __future__ import annotations

import pytest

from app.core.budget.aged_budget import (
    aged_growing_bytes,
    aged_kv_bytes_at,
    aged_max_context,
    aged_tier_bytes,
    tier_tokens,
    validate_aging,
)
from app.core.budget.kv_budget import kv_bytes_at
from app.core.presets.generation_settings import KVAging, KVSettings

LONG_DOCUMENT = KVAging(
    recent_tokens=512,
    band_tokens=2048,
    band_key_bits=8,
    band_value_bits=4,
    floor_key_bits=4,
    floor_value_bits=4,
)


def test_a_short_cache_is_all_recent_and_grows_in_blocks():
    assert tier_tokens(0, LONG_DOCUMENT) == [(0, 0), (0, 0), (0, 0)]
    assert tier_tokens(300, LONG_DOCUMENT) == [(300, 512), (0, 0), (0, 0)]
    # Below size + one block nothing moves yet.
    assert tier_tokens(767, LONG_DOCUMENT) == [(767, 768), (0, 0), (0, 0)]


def test_blocks_move_down_once_a_tier_passes_its_size_by_a_block():
    # 768 tokens: one block leaves the recent tier, which keeps room for 512 + 256.
    assert tier_tokens(768, LONG_DOCUMENT) == [(512, 768), (256, 256), (0, 0)]
    assert tier_tokens(1000, LONG_DOCUMENT) == [(744, 768), (256, 256), (0, 0)]
    # The band fills to 2048 + 256, then passes its oldest block to the floor.
    assert tier_tokens(512 + 2304, LONG_DOCUMENT) == [
        (512, 768),
        (2048, 2304),
        (256, 256),
    ]
    assert tier_tokens(8192, LONG_DOCUMENT) == [(512, 768), (2048, 2304), (5632, 5632)]


def test_every_token_is_in_exactly_one_tier():
    for n in range(0, 6000, 37):
        assert sum(held for held, _ in tier_tokens(n, LONG_DOCUMENT)) == n


def test_without_recent_tokens_they_are_quantized_on_arrival():
    uniform_k8v4 = KVAging(recent_tokens=0, floor_key_bits=8, floor_value_bits=4)
    assert tier_tokens(300, uniform_k8v4) == [(300, 512)]


def test_tier_bytes_count_keys_and_values_at_their_own_bits(geometry):
    llama = geometry("llama-3.1-8b-instruct")  # 32 layers x 8 KV heads x 128
    tiers = aged_tier_bytes(llama, 8192, LONG_DOCUMENT, 64, act_dtype_bytes=2)
    recent, band, floor = tiers
    per_head_k8v4 = (128 + 4 * 2) + (64 + 4 * 2)  # packed + scale and bias per group
    assert band.nbytes == 2304 * 32 * 8 * per_head_k8v4
    assert recent.nbytes == 768 * 32 * 8 * 256 * 2
    assert floor.nbytes == 5632 * 32 * 8 * (72 + 72)
    assert aged_growing_bytes(llama, 8192, LONG_DOCUMENT, 64, 2) == sum(
        t.nbytes for t in tiers
    )


def test_sliding_and_state_layers_count_as_for_a_uniform_cache(geometry):
    gemma = geometry("gemma-3-1b-it")  # mostly sliding layers, a few full ones
    aged = aged_kv_bytes_at(gemma, 4096, LONG_DOCUMENT, 64, act_dtype_bytes=2)
    full_bytes_16 = kv_bytes_at(gemma, 4096, 16, act_dtype_bytes=2)
    growing = aged_growing_bytes(gemma, 4096, LONG_DOCUMENT, 64, 2)
    # The bounded part is whatever the uniform cache holds beyond its full layers.
    assert aged - growing == full_bytes_16 - _full_layers_16(gemma, 4096)


def _full_layers_16(geometry, tokens):
    from app.core.budget.layers import LayerKind

    return sum(
        tokens * layer.kv_elements_per_token * 2
        for layer in geometry.layers
        if layer.kind is LayerKind.FULL
    )


def test_the_max_context_is_the_longest_length_that_fits(geometry):
    qwen = geometry("qwen2.5-0.5b-instruct")
    limit = 50 * 2**20
    tokens = aged_max_context(qwen, LONG_DOCUMENT, 64, limit, act_dtype_bytes=4)
    assert tokens % 256 == 0 and tokens > 0
    assert aged_growing_bytes(qwen, tokens, LONG_DOCUMENT, 64, 4) <= limit
    assert aged_growing_bytes(qwen, tokens + 256, LONG_DOCUMENT, 64, 4) > limit


def test_invalid_agings_name_the_value():
    with pytest.raises(ValueError, match="multiple of the block"):
        KVAging(recent_tokens=1000)
    with pytest.raises(ValueError, match="band_value_bits must be one of"):
        KVAging(band_tokens=256, band_value_bits=7)
    with pytest.raises(ValueError, match="cannot be more precise than the band"):
        KVAging(band_tokens=256, band_key_bits=4, floor_key_bits=8)
    with pytest.raises(ValueError, match="block must be one of"):
        KVAging(block_tokens=100)
    with pytest.raises(ValueError, match="floor key bits"):
        KVSettings(bits=8, aging=LONG_DOCUMENT)
    with pytest.raises(ValueError, match="power-of-two head size, not 96"):
        validate_aging(KVAging(rotate_keys=True), 32, [96])
    with pytest.raises(ValueError, match="does not divide head_dim 96"):
        validate_aging(LONG_DOCUMENT, 64, [96])


def test_a_spec_round_trips_and_names_the_tiers():
    rotated = KVAging(
        recent_tokens=256, floor_key_bits=4, floor_value_bits=2, rotate_keys=True
    )
    for aging in (LONG_DOCUMENT, KVAging(), rotated):
        assert KVAging.from_spec(aging.spec) == aging
    assert LONG_DOCUMENT.spec == "r512+b2048k8v4+k4v4/256"
    assert LONG_DOCUMENT.label() == "512 exact, 2,048 at K8/V4, then 4-bit"
    assert rotated.label() == "256 exact, then K4/V2 (keys rotated)"
    with pytest.raises(ValueError, match="not a KV aging spec"):
        KVAging.from_spec("8")
