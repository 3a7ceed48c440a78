"""Prefill chunks as large as the memory budget allows, and never larger."""

from __future__ import annotations

import pytest

from app.core.budget.device_budget import DeviceBudget
from app.core.budget.kv_budget import fixed_kv_bytes
from app.core.budget.memory_budget import GIB, BudgetSettings
from app.core.budget.prefill_budget import (
    CHUNK_STEP,
    activation_bytes_per_token,
    chunk_allowance,
    chunk_bytes,
    largest_chunk,
)

QWEN = "qwen2.5-0.5b-instruct"


def test_activation_bytes_per_token_by_hand(geometry):
    g = geometry(QWEN)
    # (3 x 896 hidden + (14 + 2 x 2) x 64 q/k/v + 3 x 4864 MLP) x 4 bytes.
    assert activation_bytes_per_token(g, 896, 4864, 4) == 18_432 * 4


def test_chunk_bytes_count_activations_and_whole_scores(geometry):
    g = geometry(QWEN)
    per_token = activation_bytes_per_token(g, 896, 4864, 4)
    # 256 tokens on top of 1,024: 14 heads x 256 queries x 1,280 keys x 4 bytes.
    assert chunk_bytes(g, 256, 1024, per_token, 4) == (
        256 * per_token + 14 * 256 * 1280 * 4
    )


def test_largest_chunk_is_the_largest_that_fits(geometry):
    g = geometry(QWEN)
    per_token = activation_bytes_per_token(g, 896, 4864, 4)
    for context in (0, 4096, 32_768):
        exact = chunk_bytes(g, 96, context, per_token, 4)
        assert largest_chunk(g, context, exact, per_token, 4, 512) == 96
        assert largest_chunk(g, context, exact - 1, per_token, 4, 512) == 64
    assert largest_chunk(g, 0, 10 * GIB, per_token, 4, 512) == 512
    assert largest_chunk(g, 0, 10 * GIB, per_token, 4, 300) == 288  # whole steps
    assert largest_chunk(g, 0, 0, per_token, 4, 512) == CHUNK_STEP
    with pytest.raises(ValueError, match="ceiling"):
        largest_chunk(g, 0, GIB, per_token, 4, CHUNK_STEP - 1)


def test_chunks_shrink_as_the_context_they_attend_to_grows(geometry):
    g = geometry(QWEN)
    per_token = activation_bytes_per_token(g, 896, 4864, 4)
    allowance = 200 * 2**20
    sizes = [
        largest_chunk(g, context, allowance, per_token, 4, 2048)
        for context in (0, 8192, 32_768, 131_072)
    ]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] > sizes[-1]


def test_device_budget_keeps_a_chunk_inside_the_room_outside_the_kv_limit(geometry):
    g = geometry(QWEN)
    per_token = activation_bytes_per_token(g, 896, 4864, 4)
    settings = BudgetSettings(reserve_bytes=GIB)
    budget = DeviceBudget(
        total_memory=2 * GIB,
        weights_bytes=200 * 2**20,
        geometry=g,
        settings=settings,
        act_dtype_bytes=4,
        activation_bytes_per_token=per_token,
    )
    allowance = chunk_allowance(
        budget.total_memory, budget.weights_bytes, fixed_kv_bytes(g, 4), settings
    )
    # (1.5 GiB - 1 GiB - 200 MiB) x (1 - 0.6) x 0.5 = 62 MiB.
    assert allowance == int((1.5 * GIB - GIB - 200 * 2**20) * 0.4 * 0.5)
    for context in (0, 2048, 8192):
        size = budget.prefill_chunk(context, 2048)
        assert chunk_bytes(g, size, context, per_token, 4) <= allowance
        assert chunk_bytes(g, size + CHUNK_STEP, context, per_token, 4) > allowance
    # Plenty of memory: the ceiling decides.
    roomy = DeviceBudget(
        64 * GIB, 200 * 2**20, g, settings, 4, activation_bytes_per_token=per_token
    )
    assert roomy.prefill_chunk(8192, 256) == 256
