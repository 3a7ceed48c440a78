"""An aged KV cache on every buildable architecture: full layers age, bounded ones don't.

Sliding-window and recurrent layers keep their own caches (and checkpoints); only the
full-attention layers become aged caches, on models whose attention mlx-lm's quantized
path cannot serve too (gpt-oss's sinks, Gemma 4's KV-shared layers: those get dense
keys and values).
"""

from __future__ import annotations

import pytest

from app.core.modelkit.arch_configs import ARCHES
from app.core.presets.generation_settings import KVAging, KVSettings, SamplingSettings

AGED = KVSettings.aged(
    KVAging(
        recent_tokens=64,
        band_tokens=64,
        band_key_bits=8,
        band_value_bits=4,
        floor_key_bits=4,
        floor_value_bits=4,
        block_tokens=64,
    )
)
GREEDY = SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=6)
SYSTEM = " ".join(["You are a terse assistant who answers in one short line."] * 12)
QUESTIONS = ("What is the capital of France?", "And of Germany?", "Which river?")


@pytest.mark.parametrize("arch", ARCHES)
def test_an_aged_cache_runs_and_reuses_turns(arch_engine, arch):
    engine = arch_engine(arch)
    key = "aged-arch"
    engine.drop_cache(key)
    messages = [{"role": "system", "content": SYSTEM}]
    finals = []
    for question in QUESTIONS:
        messages.append({"role": "user", "content": question})
        handle = engine.chat(key, messages, AGED, GREEDY)
        messages.append({"role": "assistant", "content": handle.text()})
        finals.append(handle.final)
    for final in finals:
        full = [g for g in final.kv_layers if g.kind == "full_attention"]
        other = [g for g in final.kv_layers if g.kind != "full_attention"]
        assert full and all(g.tier for g in full)
        assert {g.tier for g in full} == {"recent", "band", "floor"}
        assert all(g.bits == 16 and not g.tier for g in other)
        assert final.kv_bytes == sum(g.nbytes for g in final.kv_layers)
    assert all(final.reused_tokens > 0 for final in finals[1:])
    engine.drop_cache(key)
