"""Prefill chunk sizes: the memory budget's limit, the kernel's ceiling, the time target."""

from __future__ import annotations

import pytest

from app.core.engine import generation
from app.core.engine.cache.conversation_cache import ConversationCache
from app.core.engine.engine import Engine
from app.core.engine.generation import (
    MIN_PREFILL_STEP,
    PREFILL_STEP,
    next_prefill_step,
    prefill_range,
)
from app.core.presets.generation_settings import KVSettings

KV = KVSettings(bits=16, group_size=64, quantized_kv_start=0)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()


def _chunks(engine, ids, chunk_limit) -> tuple[list[int], list[int]]:
    """Prefill ``ids`` on a fresh cache; return the chunk sizes and the held ids."""

    def job():
        cache = ConversationCache(engine._require_model().model, KV)
        done: list[int] = []
        prefill_range(
            engine._require_model().model,
            cache,
            ids,
            len(ids),
            on_chunk=done.append,
            chunk_limit=chunk_limit,
        )
        sizes = [b - a for a, b in zip([0, *done], done, strict=False)]
        return sizes, list(cache.token_ids)

    return engine.submit(job).result()


def test_chunks_never_pass_the_budget_limit(engine):
    ids = list(range(3, 403))
    asked: list[tuple[int, int]] = []

    def limit(context: int, ceiling: int) -> int:
        asked.append((context, ceiling))
        return 96 if context < 200 else 64

    sizes, held = _chunks(engine, ids, limit)
    assert held == ids
    assert sum(sizes) == len(ids)
    contexts = [0]
    for size in sizes[:-1]:
        contexts.append(contexts[-1] + size)
    for context, size in zip(contexts, sizes, strict=True):
        assert size <= (96 if context < 200 else 64)
    # Asked before every chunk, with the context it attends to.
    assert [c for c, _ in asked] == contexts
    assert all(ceiling <= PREFILL_STEP for _, ceiling in asked)


def test_the_engine_asks_its_budget(engine):
    budget = engine.device_budget
    assert budget is not None and budget.activation_bytes_per_token > 0
    limit = engine._chunk_limit()
    assert limit is not None
    # The tiny model on any machine that runs the tests: the ceiling decides.
    assert limit(0, 256) == 256
    assert budget.prefill_chunk(0, 512) == 512


def test_the_time_target_stays_under_the_ceiling():
    assert next_prefill_step(256, 256, 0.01, ceiling=256) == 256
    assert next_prefill_step(128, 128, 0.01, ceiling=256) == 256
    assert next_prefill_step(256, 256, 100.0, ceiling=256) == MIN_PREFILL_STEP


def test_kernel_models_take_chunks_the_kernel_serves(monkeypatch):
    from app.core.engine.cpu import backend
    from app.core.engine.cpu.native_kernel import KERNEL_ROWS, KernelState

    monkeypatch.setattr(backend, "_kernel_state", KernelState(True, "test"))
    assert generation.chunk_ceiling() == min(PREFILL_STEP, KERNEL_ROWS)
    monkeypatch.setattr(backend, "_kernel_state", KernelState(False, "test"))
    assert generation.chunk_ceiling() == PREFILL_STEP
