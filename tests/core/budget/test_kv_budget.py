"""KV bytes per token and at a context length, against figures computed by hand."""

from __future__ import annotations

import pytest

from app.core.budget.kv_budget import (
    ALLOCATION_STEP,
    STATE_CHECKPOINTS,
    bounded_kv_bytes,
    bytes_per_element,
    bytes_per_token,
    checkpoint_bytes,
    fixed_kv_bytes,
    kv_bytes_at,
    prefill_scores_bytes,
    round_up_to_step,
    validate_kv_quantization,
)
from app.core.budget.model_geometry import geometry_from_config

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("bits", "group", "act", "expected"),
    [
        (16, 64, 2, 2.0),
        (16, 64, 4, 4.0),
        (8, 64, 2, 1 + 4 / 64),  # 1.0625
        (4, 64, 2, 0.5 + 4 / 64),  # 0.5625
        (8, 32, 4, 1 + 8 / 32),  # 1.25 with float32 scales and biases
        (4, 128, 2, 0.5 + 4 / 128),
    ],
)
def test_bytes_per_element(bits, group, act, expected):
    assert bytes_per_element(bits, group, act) == expected


def test_llama_3_1_8b_per_token(geometry):
    g = geometry("llama-3.1-8b-instruct")
    # 2 (K and V) x 32 layers x 8 heads x 128 dims x 2 bytes.
    assert bytes_per_token(g) == 131_072
    assert bytes_per_token(g, 8, 64) == 2 * 32 * 8 * 128 * 1.0625 == 69_632
    assert bytes_per_token(g, 4, 64) == 2 * 32 * 8 * 128 * 0.5625 == 36_864
    # On the CPU backend the engine runs in float32.
    assert bytes_per_token(g, act_dtype_bytes=4) == 262_144
    assert bytes_per_token(g, 8, 64, act_dtype_bytes=4) == 2 * 32 * 8 * 128 * 1.125


def test_qwen2_5_0_5b_per_token(geometry):
    # 2 x 24 layers x 2 heads x 64 dims x 2 bytes.
    assert bytes_per_token(geometry("qwen2.5-0.5b-instruct")) == 12_288


def test_kv_bytes_at_rounds_up_to_the_allocation_step(geometry):
    g = geometry("llama-3.1-8b-instruct")
    assert kv_bytes_at(g, 1000) == 1024 * 131_072 == 128 * MIB
    assert kv_bytes_at(g, 1000, allocation_rounding=False) == 1000 * 131_072
    assert kv_bytes_at(g, 1024) == 128 * MIB
    assert kv_bytes_at(g, 1025) == 1280 * 131_072
    assert kv_bytes_at(g, 0) == 0


def test_mistral_is_not_capped_because_mlx_lm_keeps_every_token(geometry):
    g = geometry("mistral-7b-v0.1")
    assert kv_bytes_at(g, 8192) == 8192 * 131_072  # 1 GiB, not 4096 x 131,072


def test_gemma3_sliding_layers_are_capped_at_their_window(geometry):
    g = geometry("gemma-3-4b-it")
    # Growing part: 5 global layers x 4 heads x 256 x 2 x 2 bytes.
    assert bytes_per_token(g) == 20_480
    # Each of the 29 sliding layers holds at most 1024 tokens of 4 x 256 x 2 x 2 bytes.
    sliding_full = 29 * 1024 * 4096
    assert bounded_kv_bytes(g) == sliding_full == 121_634_816
    # The budget also sets aside the turn-reuse checkpoints of those windows.
    assert checkpoint_bytes(g) == sliding_full
    assert fixed_kv_bytes(g) == (1 + STATE_CHECKPOINTS) * sliding_full
    assert kv_bytes_at(g, 300) == 512 * 20_480 + 29 * 512 * 4096
    assert kv_bytes_at(g, 1000) == 1024 * 20_480 + sliding_full
    assert kv_bytes_at(g, 8192) == 8192 * 20_480 + sliding_full == 289_406_976


def test_quantized_bits_apply_to_full_layers_only(geometry):
    g = geometry("gemma-3-4b-it")
    # mlx-lm cannot quantize a RotatingKVCache, so sliding layers stay 16-bit.
    per_token_4bit = 5 * 4 * 2 * (256 // 2 + 2 * 2 * (256 // 64))  # 5,760
    assert bytes_per_token(g, 4, 64) == per_token_4bit
    assert kv_bytes_at(g, 8192, 4, 64) == 8192 * per_token_4bit + 121_634_816


def test_full_attention_models_set_nothing_aside(geometry):
    g = geometry("llama-3.1-8b-instruct")
    assert bounded_kv_bytes(g) == checkpoint_bytes(g) == fixed_kv_bytes(g) == 0


def test_gemma3_1b_and_270m(geometry):
    g1 = geometry("gemma-3-1b-it")
    assert bytes_per_token(g1) == 4 * 1 * 256 * 2 * 2
    assert bounded_kv_bytes(g1) == 22 * 512 * 1024
    g270 = geometry("gemma-3-270m")
    assert bytes_per_token(g270) == 3 * 256 * 2 * 2
    assert bounded_kv_bytes(g270) == 15 * 512 * 1024


def test_gemma2_counts_every_layer(geometry):
    assert bytes_per_token(geometry("gemma-2-9b-it")) == 2 * 42 * 8 * 256 * 2


def test_qwen3_next_constant_state_is_included(geometry):
    g = geometry("qwen3-next-80b-a3b-instruct")
    assert bytes_per_token(g) == 2 * 12 * 2 * 256 * 2  # 24,576: 12 full layers
    state = 36 * (3 * 8192 * 2 + 32 * 128 * 128 * 4)
    assert bounded_kv_bytes(g) == state == 77_266_944
    assert kv_bytes_at(g, 4096) == 4096 * 24_576 + state
    # float32 activations double the convolution state, not the float32 recurrence.
    assert bounded_kv_bytes(g, act_dtype_bytes=4) == 36 * (
        3 * 8192 * 4 + 32 * 128 * 128 * 4
    )


def test_jamba(geometry):
    g = geometry("jamba-v0.1")
    assert bytes_per_token(g) == 2 * 4 * 8 * 128 * 2
    assert bounded_kv_bytes(g) == 28 * (3 * 8192 + 8192 * 16) * 2


def test_deepseek_v3_latent_cache(geometry):
    g = geometry("deepseek-v3")
    assert bytes_per_token(g) == 61 * (512 + 64) * 2  # 70,272
    # 8-bit: packed bytes plus a bf16 scale and bias per 64 elements, keys and values.
    assert bytes_per_token(g, 8, 64) == 61 * ((512 + 2 * 2 * 8) + (64 + 2 * 2 * 1))
    with pytest.raises(ValueError, match="does not divide head_dim 64"):
        bytes_per_token(g, 8, 128)


def test_pure_state_model_does_not_grow():
    g = geometry_from_config(
        {
            "model_type": "mamba",
            "hidden_size": 768,
            "intermediate_size": 1536,
            "state_size": 16,
            "num_hidden_layers": 24,
            "conv_kernel": 4,
        }
    )
    assert bytes_per_token(g, 4, 64) == 0
    assert kv_bytes_at(g, 100_000) == kv_bytes_at(g, 1) == bounded_kv_bytes(g)


def test_group_must_divide_head_dim_with_valid_values_listed(geometry):
    g = geometry("qwen2.5-0.5b-instruct")  # head_dim 64
    with pytest.raises(ValueError, match=r"valid group sizes for this model: 32, 64"):
        kv_bytes_at(g, 1024, 8, 128)
    # At 16 bits the group is irrelevant.
    assert kv_bytes_at(g, 1024, 16, 128) == 1024 * 12_288


@pytest.mark.parametrize(
    ("bits", "group", "message"),
    [
        (6, 64, "KV bits must be one of 16, 8, 4, not 6"),
        (2, 64, "KV bits must be one of 16, 8, 4, not 2"),
        (8, 16, "KV group size must be one of 32, 64, 128, not 16"),
        (4, 96, "KV group size must be one of 32, 64, 128, not 96"),
    ],
)
def test_invalid_bits_and_groups(geometry, bits, group, message):
    with pytest.raises(ValueError, match=message):
        validate_kv_quantization(bits, group)
    with pytest.raises(ValueError, match=message):
        bytes_per_token(geometry("llama-3.1-8b-instruct"), bits, group)


def test_invalid_lengths_and_dtype_widths(geometry):
    g = geometry("llama-3.1-8b-instruct")
    with pytest.raises(ValueError, match=">= 0"):
        kv_bytes_at(g, -1)
    with pytest.raises(ValueError, match="act_dtype_bytes must be one of 2, 4"):
        kv_bytes_at(g, 10, act_dtype_bytes=3)


def test_round_up_to_step():
    assert [round_up_to_step(n) for n in (0, 1, 256, 257)] == [0, 256, 256, 512]
    assert ALLOCATION_STEP == 256


def test_prefill_scores_bytes(geometry):
    g = geometry("llama-3.1-8b-instruct")
    # 32 query heads x 2048 x 32,768 keys x 4 bytes: 8 GiB, twice the fp16 cache.
    assert prefill_scores_bytes(g, 2048, 32768, 4) == 8 * 1024**3
    assert prefill_scores_bytes(g, 2048, 32768, 4) == kv_bytes_at(
        g, 32768, act_dtype_bytes=4
    )
