"""The budget per layer kind against the live cache of every buildable architecture.

For each tiny model built by ``swapless make-model --arch NAME`` the cache mlx-lm makes
is filled through the engine's own quantization rule (full attention at the requested
bits, sliding windows and recurrent state left alone), and its ``nbytes`` is compared
with ``kv_bytes_at`` from config.json alone. The acceptance is +-2 %; they are equal.
"""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from mlx_lm.models.cache import make_prompt_cache  # noqa: E402

from app.core.budget.kv_budget import checkpoint_bytes, kv_bytes_at  # noqa: E402
from app.core.budget.layers import LayerKind  # noqa: E402
from app.core.budget.model_geometry import read_geometry  # noqa: E402
from app.core.engine.cache.cache_checkpoints import Checkpoints  # noqa: E402
from app.core.engine.cache.cache_layers import (  # noqa: E402
    dense_view_indices,
    layer_kind,
    quantize_growing_layers,
)
from app.core.engine.loader import load_model_folder  # noqa: E402
from app.core.modelkit.arch_configs import ARCHES  # noqa: E402
from app.core.presets.generation_settings import KVSettings  # noqa: E402

# What the CPU backend stores (`kv_storage`): keys, values and scales in 16 bits,
# recurrent state at the float32 activations.
KV_BYTES, STATE_BYTES = 2, 4

# 40: under the 64-token sliding window of the tiny shape; 300: past it, and past one
# 256-token allocation step.
LENGTHS = (40, 300)


@pytest.fixture(scope="module")
def loaded(arch_model_dir):
    models = {}

    def get(arch):
        if arch not in models:
            models[arch] = load_model_folder(arch_model_dir(arch))
        return models[arch]

    return get


def filled_cache(model, tokens: int, kv: KVSettings) -> list:
    """A prompt of ``tokens`` tokens in one chunk, then one decoded token."""
    cache = make_prompt_cache(model)
    dense = dense_view_indices(model, cache)
    model(mx.random.randint(0, 1000, (1, tokens - 1)), cache=cache)
    quantize_growing_layers(cache, kv, dense)
    # One decode step: a sliding window drops what the prefill chunk held beyond it.
    model(mx.array([[7]]), cache=cache)
    mx.eval([c.state for c in cache])
    return cache


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("bits", [16, 8, 4])
def test_live_cache_matches_the_budget(arch_model_dir, loaded, arch, bits):
    geometry = read_geometry(arch_model_dir(arch))
    model = loaded(arch).model
    for tokens in LENGTHS:
        cache = filled_cache(model, tokens, KVSettings(bits=bits))
        live = sum(c.nbytes for c in cache)
        predicted = kv_bytes_at(
            geometry,
            tokens,
            bits,
            64,
            act_dtype_bytes=KV_BYTES,
            state_dtype_bytes=STATE_BYTES,
        )
        assert live == pytest.approx(predicted, rel=0.02), (tokens, live, predicted)
        assert live == predicted, (tokens, live, predicted)


@pytest.mark.parametrize("arch", ARCHES)
def test_layer_kinds_are_the_ones_the_budget_plans(arch_model_dir, loaded, arch):
    geometry = read_geometry(arch_model_dir(arch))
    cache = make_prompt_cache(loaded(arch).model)
    assert [layer_kind(c) for c in cache] == [
        layer.kind.value for layer in geometry.layers
    ]


@pytest.mark.parametrize("arch", ARCHES)
def test_a_checkpoint_costs_what_the_budget_sets_aside(arch_model_dir, loaded, arch):
    geometry = read_geometry(arch_model_dir(arch))
    cache = filled_cache(loaded(arch).model, 300, KVSettings(bits=8))
    checkpoints = Checkpoints()
    taken = checkpoints.take(300, cache)
    # Windows are full at 300 tokens, so a checkpoint is at its largest.
    assert taken.nbytes == checkpoint_bytes(
        geometry, act_dtype_bytes=KV_BYTES, state_dtype_bytes=STATE_BYTES
    )
    bounded = any(layer.kind is not LayerKind.FULL for layer in geometry.layers)
    assert (taken.nbytes > 0) == bounded


@pytest.mark.parametrize("arch", ["gemma4_text", "gpt_oss"])
def test_quantized_attention_that_mlx_lm_cannot_serve_gets_a_dense_view(loaded, arch):
    # gpt-oss has attention sinks; Gemma 4's KV-shared layers read another layer's KV.
    # mlx-lm's quantized attention fails on both; the dense view stores 8-bit and
    # hands attention dense arrays.
    model = loaded(arch).model
    cache = filled_cache(model, 300, KVSettings(bits=8))
    dense = dense_view_indices(model, cache)
    assert dense
    assert all(type(cache[i]).__name__ == "DenseViewQuantizedKVCache" for i in dense)
    logits = model(mx.array([[3, 4, 5]]), cache=cache)
    assert bool(mx.all(mx.isfinite(logits)))
