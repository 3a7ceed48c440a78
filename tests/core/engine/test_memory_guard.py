"""Swapless enforces its memory budget itself, before allocating (MLX does not on CPU)."""

from __future__ import annotations

import psutil
import pytest

from app.core.budget.memory_budget import BudgetSettings, memory_budget_bytes
from app.core.engine.engine import Engine
from app.core.errors import BudgetError, ModelLoadError
from app.core.presets.generation_settings import KVSettings, SamplingSettings


def tight_settings(weights_bytes: int, kv_room_bytes: int) -> BudgetSettings:
    """Settings that leave exactly ``kv_room_bytes`` after the weights (before safety)."""
    total = psutil.virtual_memory().total
    base = BudgetSettings()
    budget = memory_budget_bytes(total, base)
    return BudgetSettings(
        reserve_bytes=base.reserve_bytes + budget - weights_bytes - kv_room_bytes
    )


def test_a_model_whose_weights_exceed_the_budget_is_refused_before_loading(
    tiny_model_dir,
):
    total = psutil.virtual_memory().total
    engine = Engine(budget_settings=BudgetSettings(reserve_bytes=int(total)))
    with pytest.raises(
        BudgetError, match=r"weights need .* more than Swapless's memory budget"
    ):
        engine.load(tiny_model_dir)
    assert engine.model_info is None


def test_device_limit_refuses_an_over_long_prompt_with_the_numbers(tiny_model_dir):
    probe = Engine()
    info = probe.load(tiny_model_dir)
    per_token = 2 * 2 * 2 * 128 * 2  # layers x (K,V) x kv heads x head dim x 16-bit
    # Room for 1024 16-bit tokens once the 0.6 safety factor is applied.
    settings = tight_settings(info.weights_bytes, int(1024 * per_token / 0.6) + 1)
    engine = Engine(budget_settings=settings)
    engine.load(tiny_model_dir)
    assert engine.max_safe_context(16) == 1024
    assert engine.max_safe_context(4) > engine.max_safe_context(8) > 1024
    long_text = "word " * 1000
    messages = [{"role": "user", "content": long_text}]
    sampling = SamplingSettings(temperature=0.0, max_tokens=8)
    with pytest.raises(
        BudgetError,
        match=r"needs up to [\d,]+ tokens .* safe limit of this machine's memory at "
        r"16-bit KV is 1,024 tokens.*or use a quantized KV cache",
    ):
        engine.chat("long", messages, KVSettings(bits=16), sampling).wait()
    assert engine.cache_state("long").tokens == 0  # nothing was allocated
    # The same request fits at 4-bit KV, where a token costs ~3.6x less (16-bit KV
    # is 2 bytes per element on the CPU backend).
    final = engine.chat("long", messages, KVSettings(bits=4), sampling).wait()
    assert final.prompt_tokens > 1024


def test_the_conversation_limit_is_enforced_by_the_engine(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    messages = [{"role": "user", "content": "word " * 300}]
    with pytest.raises(
        BudgetError, match="this conversation's context limit is 256"
    ) as e:
        engine.chat(
            "c", messages, KVSettings(), SamplingSettings(max_tokens=8), max_context=256
        ).wait()
    # A smaller KV cache would not help against the user's own limit.
    assert "KV cache" not in str(e.value)


def test_the_trained_context_is_named_as_the_limit_without_kv_advice(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    trained = engine.device_budget.geometry.max_position_embeddings
    messages = [{"role": "user", "content": "hello"}]
    with pytest.raises(BudgetError) as e:
        engine.chat(
            "t", messages, KVSettings(bits=4), SamplingSettings(max_tokens=trained)
        ).wait()
    assert f"the model's trained context is {trained:,} tokens" in str(e.value)
    assert "KV cache" not in str(e.value)


def test_growth_of_all_live_caches_is_checked_before_a_prefill(tiny_model_dir):
    probe = Engine()
    info = probe.load(tiny_model_dir)
    messages = [{"role": "user", "content": "word " * 300}]
    sampling = SamplingSettings(temperature=0.0, max_tokens=4)
    steps = -(-(len(probe.render(messages)) + 4) // 256)  # 256-token allocation steps
    per_token = 2 * 2 * 2 * 128 * 2  # 16-bit KV on the CPU backend
    # Room for two such conversations and a half.
    settings = tight_settings(
        info.weights_bytes, int(2.5 * steps * 256 * per_token / 0.6)
    )
    engine = Engine(budget_settings=settings, max_idle_caches=8)
    engine.load(tiny_model_dir)
    engine.chat("one", messages, KVSettings(bits=16), sampling).wait()
    engine.chat("two", messages, KVSettings(bits=16), sampling).wait()
    # Each conversation alone fits, but a third would pass the limit of all KV
    # together: the least recently used idle cache is dropped to make room.
    engine.chat("three", messages, KVSettings(bits=16), sampling).wait()
    assert engine.cache_state("one").tokens == 0
    assert engine.cache_state("two").tokens and engine.cache_state("three").tokens
    assert engine.live_kv_bytes() <= engine.device_budget.kv_limit()


def test_the_limit_never_passes_the_trained_context(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    # 24 GiB of RAM would allow millions of tokens; the tiny model was built for 16K.
    assert engine.device_budget.max_context(4) > 1_000_000
    assert (
        engine.max_safe_context(4)
        == engine.device_budget.geometry.max_position_embeddings
    )


def test_no_room_for_a_cache_is_a_limit_of_zero_not_the_trained_context(
    tiny_model_dir,
):
    probe = Engine()
    info = probe.load(tiny_model_dir)
    # Room for fewer tokens than one 256-token allocation step.
    per_token = 2 * 2 * 2 * 128 * 4
    engine = Engine(budget_settings=tight_settings(info.weights_bytes, 100 * per_token))
    engine.load(tiny_model_dir)
    assert engine.device_budget.max_context(16) == 0
    assert engine.max_safe_context(16) == 0
    messages = [{"role": "user", "content": "hello"}]
    sampling = SamplingSettings(temperature=0.0, max_tokens=4)
    with pytest.raises(BudgetError, match="machine's memory at 16-bit KV is 0 tokens"):
        engine.chat("none", messages, KVSettings(bits=16), sampling).wait()


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"torch_dtype": "float8_e4m3fn"}, "torch_dtype"),
        ({"max_position_embeddings": 0}, "max_position_embeddings"),
        ({"max_position_embeddings": -4096}, "max_position_embeddings"),
    ],
)
def test_a_model_whose_geometry_cannot_be_read_is_not_loaded_without_a_budget(
    tiny_model_dir, tmp_path, change, key
):
    """It loaded with no budget at all, and a request the same weights refuse normally
    was answered (RSS 608 MiB over a 256 MiB budget)."""
    import json
    import shutil

    folder = tmp_path / "odd-config"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(change)
    (folder / "config.json").write_text(json.dumps(config))
    engine = Engine()
    try:
        with pytest.raises(ModelLoadError) as raised:
            engine.load(folder)
        assert key in str(raised.value) and "no memory budget" in str(raised.value)
        assert engine.model_info is None and engine.device_budget is None
    finally:
        engine.shutdown()
