"""The conversation-cache LRU stays inside the memory budget: idle caches go first."""

from __future__ import annotations

import psutil
import pytest

from app.core.budget.memory_budget import BudgetSettings
from app.core.engine.engine import Engine
from app.core.errors import BudgetError
from app.core.presets.generation_settings import KVSettings, SamplingSettings

KV = KVSettings(bits=16)
GREEDY = SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=4)
# Two 512-token allocations of the tiny model (2 KiB/token: 16-bit KV on the CPU).
TWO_CACHES = 2 * 2**20
KV_LIMIT = TWO_CACHES + 2**16  # room for two caches, not three


@pytest.fixture
def engine(tiny_model_dir):
    engine = Engine(max_idle_caches=4)
    info = engine.load(tiny_model_dir)
    total = psutil.virtual_memory().total
    cap, safety = 0.5, 0.6
    reserve = int(total * cap) - info.weights_bytes - int(KV_LIMIT / safety)
    engine.set_budget_settings(
        BudgetSettings(
            memory_cap_fraction=cap, reserve_bytes=reserve, safety_factor=safety
        )
    )
    assert abs(engine.device_budget.kv_limit() - KV_LIMIT) < 4096
    yield engine
    engine.shutdown()


def prompt(offset: int, length: int = 300) -> list[int]:
    return [10 + (offset + i) % 900 for i in range(length)]


def test_a_request_that_fits_alone_drops_the_oldest_idle_cache(engine):
    engine.generate("a", prompt(0), KV, GREEDY).wait()
    engine.generate("b", prompt(1), KV, GREEDY).wait()
    held = engine.cache_state("a").kv_bytes + engine.cache_state("b").kv_bytes
    assert engine.live_kv_bytes() == held
    # Two 304-token caches. This small budget caps prefill chunks below 256 tokens
    # (`prefill_budget`), and a cache grown by chunks that end off its 256-token steps
    # allocates up to one step less than the 512 tokens of a one-chunk prefill.
    assert TWO_CACHES - 2 * 2**20 < held <= TWO_CACHES
    engine.generate("c", prompt(2), KV, GREEDY).wait()
    assert engine.cache_state("a").tokens == 0  # least recently used: dropped
    assert engine.cache_state("b").tokens == 304
    assert engine.cache_state("c").tokens == 304
    assert engine.live_kv_bytes() <= KV_LIMIT


def test_a_request_too_big_even_alone_is_refused_and_drops_nothing(engine):
    engine.generate("a", prompt(0), KV, GREEDY).wait()
    with pytest.raises(BudgetError):
        engine.generate("big", prompt(1, 1100), KV, GREEDY).wait()
    assert engine.cache_state("a").tokens == 304


def test_an_owner_that_needs_room_drops_its_own_oldest_cache_first(engine):
    # The app's conversation is the oldest, but the server client needs the room: its
    # own older conversation goes, and the app's next turn reuses its cache.
    engine.generate("conversation-1", prompt(0), KV, GREEDY).wait()
    engine.generate("server-1", prompt(1), KV, GREEDY).wait()
    engine.generate("server-2", prompt(2), KV, GREEDY).wait()
    assert engine.cache_state("conversation-1").tokens == 304
    assert engine.cache_state("server-1").tokens == 0
    assert engine.cache_state("server-2").tokens == 304
    assert engine.live_kv_bytes() <= KV_LIMIT
    # The app needs room next: its own old conversation goes, the client's stays.
    engine.generate("conversation-2", prompt(3), KV, GREEDY).wait()
    assert engine.cache_state("conversation-1").tokens == 0
    assert engine.cache_state("server-2").tokens == 304
    # An owner with no other cache takes the oldest cache of another, as before.
    engine.generate("bench-1", prompt(4), KV, GREEDY).wait()
    assert engine.cache_state("server-2").tokens == 0
    assert engine.cache_state("conversation-2").tokens == 304
    assert engine.live_kv_bytes() <= KV_LIMIT


def test_past_the_idle_count_the_new_keys_owner_gives_up_its_own_cache_first(
    tiny_model_dir,
):
    engine = Engine(max_idle_caches=2)
    engine.load(tiny_model_dir)
    try:
        for key in ("conversation-1", "conversation-2", "server-1", "server-2"):
            engine.generate(key, prompt(0, 40), KV, GREEDY).wait()
        held = {
            key: engine.cache_state(key).tokens > 0
            for key in ("conversation-1", "conversation-2", "server-1", "server-2")
        }
        # Three caches at most: the client's older one went, not the app's oldest.
        assert held == {
            "conversation-1": True,
            "conversation-2": True,
            "server-1": False,
            "server-2": True,
        }
    finally:
        engine.shutdown()
