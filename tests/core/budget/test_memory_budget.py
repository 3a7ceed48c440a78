"""The memory budget: settings, max safe context and the three checks."""

from __future__ import annotations

import pytest

from app.core.budget.kv_budget import (
    STATE_CHECKPOINTS,
    bytes_per_token,
    checkpoint_bytes,
    fixed_kv_bytes,
    kv_bytes_at,
)
from app.core.budget.memory_budget import (
    DEFAULT_MEMORY_CAP_FRACTION,
    DEFAULT_RESERVE_BYTES,
    DEFAULT_SAFETY_FACTOR,
    GIB,
    BudgetSettings,
    check_kv_growth,
    check_model_fits,
    check_request_fits,
    kv_limit_bytes,
    max_safe_context,
    memory_budget_bytes,
    within_trained_context,
)
from app.core.budget.model_geometry import geometry_from_config
from app.core.errors import BudgetError, SettingsError

DEFAULTS = BudgetSettings()


def test_defaults():
    assert DEFAULTS.memory_cap_fraction == DEFAULT_MEMORY_CAP_FRACTION == 0.75
    assert DEFAULTS.reserve_bytes == DEFAULT_RESERVE_BYTES == 2 * GIB
    assert DEFAULTS.safety_factor == DEFAULT_SAFETY_FACTOR == 0.6
    assert BudgetSettings.from_dict(DEFAULTS.to_dict()) == DEFAULTS


def test_memory_budget_bytes():
    # 16 GiB x 0.75 - 2 GiB = 10 GiB.
    assert memory_budget_bytes(16 * GIB, DEFAULTS) == 10 * GIB
    assert memory_budget_bytes(2 * GIB, DEFAULTS) == 0  # never negative


def test_max_safe_context_llama_8b_on_16_gib(geometry):
    g = geometry("llama-3.1-8b-instruct")
    weights = int(4.5 * GIB)
    # (10 GiB - 4.5 GiB) / 128 KiB per token = 45,056 tokens; x 0.6 = 27,033.6;
    # rounded down to a whole 256-token step = 26,880.
    assert max_safe_context(16 * GIB, weights, g, 16, 64, DEFAULTS) == 26_880
    # 8-bit (69,632 B/token): 50,886.8 -> 50,688; 4-bit (36,864 B/token): 96,000.
    assert max_safe_context(16 * GIB, weights, g, 8, 64, DEFAULTS) == 50_688
    assert max_safe_context(16 * GIB, weights, g, 4, 64, DEFAULTS) == 96_000


def test_max_safe_context_sets_sliding_windows_aside_first(geometry):
    g = geometry("gemma-3-4b-it")
    # 8 GiB x 0.75 - 2 GiB reserve - 2 GiB weights - 116 MiB of full sliding windows
    # and 3 x 116 MiB of their turn-reuse checkpoints (4 x 121,634,816 = 486,539,264)
    # = 1,660,944,384 bytes; x 0.6 / 20,480 B/token = 48,660 -> 48,640.
    assert max_safe_context(8 * GIB, 2 * GIB, g, 16, 64, DEFAULTS) == 48_640


def test_max_safe_context_uses_the_runtime_dtype(geometry):
    g = geometry("llama-3.1-8b-instruct")
    fp16 = max_safe_context(64 * GIB, 0, g, 16, 64, DEFAULTS)
    fp32 = max_safe_context(64 * GIB, 0, g, 16, 64, DEFAULTS, act_dtype_bytes=4)
    assert fp32 == pytest.approx(fp16 / 2, abs=256)


def test_max_safe_context_is_never_negative(geometry):
    g = geometry("llama-3.1-8b-instruct")
    assert max_safe_context(8 * GIB, 16 * GIB, g, 16, 64, DEFAULTS) == 0


def test_max_safe_context_of_a_pure_state_model_is_unbounded():
    g = geometry_from_config(
        {
            "model_type": "mamba",
            "hidden_size": 64,
            "intermediate_size": 128,
            "state_size": 16,
            "num_hidden_layers": 2,
            "conv_kernel": 4,
        }
    )
    assert max_safe_context(8 * GIB, GIB, g, 16, 64, DEFAULTS) is None


@pytest.mark.parametrize(
    "name",
    [
        "llama-3.1-8b-instruct",
        "gemma-3-4b-it",
        "qwen3-next-80b-a3b-instruct",
        "jamba-v0.1",
    ],
)
@pytest.mark.parametrize("bits", [16, 8, 4])
def test_cache_at_the_safe_context_stays_within_the_kv_limit(geometry, name, bits):
    g = geometry(name)
    total, weights = 32 * GIB, 3 * GIB
    tokens = max_safe_context(total, weights, g, bits, 64, DEFAULTS)
    limit = kv_limit_bytes(total, weights, DEFAULTS, fixed_kv_bytes(g))
    checkpoints = STATE_CHECKPOINTS * checkpoint_bytes(g)
    assert tokens > 0
    assert kv_bytes_at(g, tokens, bits, 64) + checkpoints <= limit
    # The limit is the longest whole number of steps: one more step would not fit.
    assert kv_bytes_at(g, tokens + 256, bits, 64) + checkpoints > limit


def test_check_model_fits_returns_room_for_the_cache():
    assert check_model_fits(16 * GIB, 4 * GIB, DEFAULTS) == 6 * GIB


def test_check_model_fits_refuses_weights_over_the_budget():
    with pytest.raises(BudgetError) as info:
        check_model_fits(16 * GIB, 11 * GIB, DEFAULTS)
    message = str(info.value)
    for figure in ("11.0 GiB", "10.0 GiB", "75%", "16.0 GiB", "2.0 GiB"):
        assert figure in message


def test_check_request_fits():
    check_request_fits(7192, 1000, 8192)  # exactly at the limit
    check_request_fits(10**9, 10**9, None)  # no limit
    with pytest.raises(BudgetError) as info:
        check_request_fits(8000, 1000, 8192)
    message = str(info.value)
    for figure in ("9,000", "8,000", "1,000", "8,192"):
        assert figure in message
    with pytest.raises(ValueError, match="max_tokens"):
        check_request_fits(10, -1, 100)


@pytest.mark.parametrize(
    ("kv_bits", "advice"),
    [(16, "or use a quantized KV cache."), (8, "or use a 4-bit KV cache."), (4, None)],
)
def test_a_refusal_suggests_a_smaller_kv_cache_only_when_there_is_one(kv_bits, advice):
    name = f"the safe limit of this machine's memory at {kv_bits}-bit KV"
    with pytest.raises(BudgetError) as info:
        check_request_fits(900, 200, 1024, limit_name=name, kv_bits=kv_bits)
    message = str(info.value)
    assert f"but {name} is 1,024 tokens" in message
    if advice is None:
        assert "KV cache" not in message
    else:
        assert message.endswith(advice)


def test_check_kv_growth_counts_whole_allocation_steps(geometry):
    per_token = bytes_per_token(geometry("llama-3.1-8b-instruct"))
    current = 1024 * per_token
    limit = current + 256 * per_token
    check_kv_growth(current, 256, per_token, limit)
    check_kv_growth(current, 1, per_token, limit)  # one token still allocates a step
    with pytest.raises(BudgetError) as info:
        check_kv_growth(current, 257, per_token, limit)
    assert "257 tokens" in str(info.value)
    assert "160.0 MiB" in str(info.value)  # the limit: 1280 x 128 KiB
    with pytest.raises(ValueError, match="extra_tokens"):
        check_kv_growth(current, -1, per_token, limit)


def test_kv_limit_bytes():
    # 10 GiB budget - 4 GiB weights - 1 GiB fixed = 5 GiB; x 0.6 = 3 GiB; + 1 GiB fixed.
    assert kv_limit_bytes(16 * GIB, 4 * GIB, DEFAULTS, GIB) == 4 * GIB
    assert kv_limit_bytes(16 * GIB, 20 * GIB, DEFAULTS) == 0


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"memory_cap": 0.5},
            "budget settings: unknown key 'memory_cap'; allowed keys are ",
        ),
        (
            {"memory_cap_fraction": 1.5},
            "memory_cap_fraction must be a number from 0.05",
        ),
        ({"memory_cap_fraction": float("nan")}, "memory_cap_fraction"),
        ({"safety_factor": 0}, "safety_factor must be a number from 0.05 to 1.0"),
        ({"safety_factor": "0.6"}, "safety_factor"),
        ({"reserve_bytes": -1}, "reserve_bytes must be a whole number of bytes"),
        ({"reserve_bytes": 1.5}, "reserve_bytes"),
        ({"reserve_bytes": True}, "reserve_bytes"),
    ],
)
def test_invalid_settings_name_the_key(data, message):
    with pytest.raises(SettingsError, match=message):
        BudgetSettings.from_dict(data)


@pytest.mark.parametrize(
    ("memory", "trained", "limit"),
    [
        (100_000, 32_768, 32_768),  # memory would allow more than the model learned
        (4_096, 32_768, 4_096),  # memory is the tighter limit
        (0, 32_768, 0),  # nothing fits: never widened to the trained context
        (None, 32_768, 32_768),  # memory does not limit it (a state-space model)
        (4_096, None, 4_096),  # the config does not say what it was trained for
        (4_096, 0, 4_096),
        (None, None, None),
    ],
)
def test_a_limit_is_capped_at_the_trained_context(memory, trained, limit):
    assert within_trained_context(memory, trained) == limit
