"""Every Swapless promise on every buildable architecture (tiny shapes, real mlx-lm).

Gemma 3 / Gemma 4 / gpt-oss have sliding-window layers (``RotatingKVCache``); Qwen3.5,
Qwen3.5-MoE, Qwen3-Next, Granite 4.0-H and LFM2 have recurrent or convolution layers
(``ArraysCache``); llama, qwen2 and qwen3 are all full attention. For each: turn reuse
without re-prefilling the history (state checkpoints where trims are not exact), greedy
output equal to a fresh prefill, quantized KV on the growing layers only, bounded
checkpoints, and the prefix cache.
"""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from app.core.budget.kv_budget import STATE_CHECKPOINTS, checkpoint_bytes  # noqa: E402
from app.core.budget.model_geometry import read_geometry  # noqa: E402
from app.core.engine.cache.conversation_cache import ConversationCache  # noqa: E402
from app.core.engine.cache.prefix_cache import PrefixCache, PrefixCacheSettings  # noqa: E402
from app.core.engine.engine import Engine  # noqa: E402
from app.core.engine.generation import prefill_range  # noqa: E402
from app.core.engine.loader import load_model_folder  # noqa: E402
from app.core.modelkit.arch_configs import ARCHES  # noqa: E402
from app.core.presets.generation_settings import KVSettings, SamplingSettings  # noqa: E402

SLIDING = ("gemma3_text", "gemma4_text", "gpt_oss")
RECURRENT = ("qwen3_5", "qwen3_5_moe", "qwen3_next", "granitemoehybrid", "lfm2")
BOUNDED = SLIDING + RECURRENT
GREEDY = SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=6)
SYSTEM = "You are a terse assistant. Answer in one short line."
QUESTIONS = (
    "What is the capital of France, and why is it there?",
    "And the capital of Germany?",
    "Thanks. One more: which river runs through Rome?",
)
# ChatML between a reply and the next reply: "<|im_end|>\n<|im_start|>user\n" before the
# message and "<|im_end|>\n<|im_start|>assistant\n" after it, with some slack.
TEMPLATE_TOKENS = 16


@pytest.fixture(scope="module")
def loaded(arch_model_dir):
    models = {}

    def get(arch):
        if arch not in models:
            models[arch] = load_model_folder(arch_model_dir(arch))
        return models[arch]

    return get


def run_chat(engine: Engine, key: str, kv: KVSettings) -> list:
    """Three turns on one cache key; returns (final event, reply, messages) per turn."""
    messages = [{"role": "system", "content": SYSTEM}]
    turns = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        handle = engine.chat(key, messages, kv, GREEDY)
        reply = handle.text()
        turns.append((handle.final, reply, list(messages)))
        messages.append({"role": "assistant", "content": reply})
    return turns


def fresh_reply(engine: Engine, messages: list, kv: KVSettings, key: str) -> str:
    engine.drop_cache(key)
    reply = engine.chat(key, messages, kv, GREEDY).text()
    engine.drop_cache(key)
    return reply


@pytest.mark.parametrize("arch", ARCHES)
def test_turn_reuse_equals_a_fresh_prefill(arch_engine, arch):
    engine = arch_engine(arch)
    for bits in (16, 8):
        kv = KVSettings(bits=bits)
        key = f"reuse-{bits}"
        engine.drop_cache(key)
        turns = run_chat(engine, key, kv)
        for index, (final, reply, messages) in enumerate(turns):
            assert reply == fresh_reply(engine, messages, kv, f"fresh-{bits}"), (
                bits,
                index,
            )
            if index == 0:
                assert final.reused_tokens == 0
                continue
            asked = engine.count_tokens(QUESTIONS[index])
            # A random-weight reply often re-tokenizes differently from what was
            # generated (split bytes become U+FFFD), so the cache can only be reused up
            # to the reply's start; its text is what gets prefilled again then.
            replied = engine.count_tokens(turns[index - 1][1])
            assert final.reused_tokens > 0
            # Only the new message (and at most the previous reply) is prefilled,
            # never the history.
            assert final.new_tokens <= replied + asked + TEMPLATE_TOKENS
            assert final.new_tokens < final.prompt_tokens / 2
            if arch in BOUNDED:
                assert final.rewind in ("none", "checkpoint")
            else:
                assert final.rewind in ("none", "trim")
        engine.drop_cache(key)


@pytest.mark.parametrize("arch", ARCHES)
def test_quantized_kv_on_growing_layers_only(arch_engine, arch_model_dir, arch):
    engine = arch_engine(arch)
    geometry = read_geometry(arch_model_dir(arch))
    finals = {}
    for bits in (16, 8):
        key = f"precision-{bits}"
        engine.drop_cache(key)
        finals[bits] = run_chat(engine, key, KVSettings(bits=bits))[-1][0]
        state = engine.cache_state(key)
        assert state.kv_layers == finals[bits].kv_layers
        engine.drop_cache(key)
    assert finals[8].kv_bytes < finals[16].kv_bytes
    assert finals[8].kv_bits == 8
    for group in finals[8].kv_layers:
        wanted = 8 if group.kind == "full_attention" else 16
        assert group.bits == wanted, group
        if group.kind.endswith("attention"):
            # Keys and values are stored in 16 bits on the CPU backend (kv_storage).
            assert group.dtype in ("float16", "bfloat16"), group
        else:  # recurrent state stays at the activation dtype
            assert group.dtype.startswith("float32"), group
    assert sum(g.count for g in finals[8].kv_layers) == len(geometry.layers)
    assert sum(g.nbytes for g in finals[8].kv_layers) == finals[8].kv_bytes


@pytest.mark.parametrize("arch", BOUNDED)
def test_rewinding_to_a_checkpoint_is_exact_and_the_state_matters(loaded, arch):
    model = loaded(arch).model
    kv = KVSettings(bits=16)
    history = [(i * 37) % 900 + 20 for i in range(200)]
    other = [(i * 53) % 900 + 20 for i in range(120)]
    tail = [(i * 11) % 900 + 20 for i in range(40)]
    # Past the 64-token window: a trim of the sliding layers would no longer be exact.
    cache = ConversationCache(model, kv)
    prefill_range(model, cache, history, 200, checkpoint_at=[120])
    assert cache.checkpoints.positions == [120, 200]
    assert cache.rewind(130) == 120
    assert cache.last_rewind == "checkpoint"
    assert cache.checkpoints.positions == [120]
    wanted = history[:120] + tail
    prefill_range(model, cache, wanted, len(wanted))
    resumed = model(mx.array([[5]]), cache=cache.layers)

    fresh = ConversationCache(model, kv)
    prefill_range(model, fresh, wanted, len(wanted))
    expected = model(mx.array([[5]]), cache=fresh.layers)
    # Exact up to float32 summation order: the chunks differ between the two paths,
    # and so do the BLAS's blockings and the native softmax's lane sums (measured at
    # most 2.5e-4 on logits up to 0.8, gemma4 with BLIS's skx kernels; a wrong state
    # moves them by 5e-3 to 1.5).
    assert mx.abs(resumed - expected).max().item() < 5e-4

    # The same tail after a different 120-token history: the bounded state carries the
    # history, so a wrong checkpoint would show.
    wrong = ConversationCache(model, kv)
    prefill_range(model, wrong, other + tail, len(other + tail))
    misled = model(mx.array([[5]]), cache=wrong.layers)
    assert mx.abs(misled - expected).max().item() > 1e-3


@pytest.mark.parametrize("arch", SLIDING)
def test_a_window_that_has_not_slid_is_trimmed_exactly(loaded, arch):
    model = loaded(arch).model
    cache = ConversationCache(model, KVSettings(bits=16))
    ids = [(i * 7) % 500 + 30 for i in range(50)]  # under the 64-token window
    prefill_range(model, cache, ids, 50)
    assert cache.rewind(45) == 45
    assert cache.last_rewind == "trim"


@pytest.mark.parametrize("arch", BOUNDED)
def test_checkpoints_stay_bounded_over_many_turns(arch_engine, arch_model_dir, arch):
    engine = arch_engine(arch)
    geometry = read_geometry(arch_model_dir(arch))
    key = "bounded"
    engine.drop_cache(key)
    messages = [{"role": "system", "content": SYSTEM}]
    for turn in range(6):
        messages.append({"role": "user", "content": f"Question {turn}: tell me more."})
        handle = engine.chat(key, messages, KVSettings(bits=8), GREEDY)
        messages.append({"role": "assistant", "content": handle.text()})
        count = engine.submit(lambda: len(engine._caches.get(key).checkpoints)).result()
        assert 1 <= count <= STATE_CHECKPOINTS
        assert handle.final.checkpoint_bytes <= STATE_CHECKPOINTS * checkpoint_bytes(
            geometry, act_dtype_bytes=4
        )
    engine.drop_cache(key)


@pytest.mark.parametrize(
    "arch", ["gemma3_text", "gpt_oss", "qwen3_5", "granitemoehybrid"]
)
def test_prefix_cache_stores_and_reloads_bounded_caches(arch_model_dir, tmp_path, arch):
    folder = tmp_path / "prefix"
    engine = Engine(prefix_cache=PrefixCache(PrefixCacheSettings(folder=folder)))
    engine.load(arch_model_dir(arch))
    system = " ".join(
        f"Rule {i}: keep answers short and cite section {i}." for i in range(12)
    )
    prefix = len(engine.render([{"role": "system", "content": system}], False))
    assert prefix >= 64  # long enough to be cached
    kv = KVSettings(bits=8)

    def ask(target, key, question):
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ]
        handle = target.chat(key, messages, kv, GREEDY)
        return handle.text(), handle.final

    ask(engine, "a", "First question?")
    reply, final = ask(engine, "b", "A different question?")
    assert final.reuse_source == "memory"
    assert final.reused_tokens == prefix
    engine.shutdown()

    restarted = Engine(prefix_cache=PrefixCache(PrefixCacheSettings(folder=folder)))
    restarted.load(arch_model_dir(arch))
    again, final = ask(restarted, "c", "A different question?")
    assert final.reuse_source == "disk"
    assert final.reused_tokens == prefix
    assert again == reply
    restarted.shutdown()

    cold = Engine(
        prefix_cache=PrefixCache(PrefixCacheSettings(folder=tmp_path / "cold"))
    )
    cold.load(arch_model_dir(arch))
    assert ask(cold, "d", "A different question?")[0] == reply
    cold.shutdown()
