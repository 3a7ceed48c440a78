"""The CPU attention path against MLX's fused attention and mlx-lm's quantized one."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from mlx_lm.models import base, llama
from mlx_lm.models.cache import KVCache

from app.core.engine.cache import kv_storage
from app.core.engine.cpu import backend, cpu_attention
from app.core.engine.loader import load_model_folder

SCALE = 0.125


def _qkv(heads, kv_heads, queries, keys, seed=0):
    mx.random.seed(seed)
    return (
        mx.random.normal((1, heads, queries, 64)),
        mx.random.normal((1, kv_heads, keys, 64)),
        mx.random.normal((1, kv_heads, keys, 64)),
    )


def _max_difference(a, b) -> float:
    return float(mx.abs(a - b).max())


def _mlx_lm_quantized(queries, q_keys, q_values, mask, bits):
    # mlx-lm scales its queries in place: hand it a copy.
    return cpu_attention.MLX_LM_QUANTIZED_SDPA(
        mx.array(queries), q_keys, q_values, SCALE, mask, group_size=64, bits=bits
    )


def test_the_weights_are_the_exponential_within_1e_5():
    x = np.concatenate([np.linspace(-30, 0, 20001), [-1e-7, 0.0]]).astype(np.float32)
    scores = mx.array(x)[None]
    weights, sums = cpu_attention.softmax_weights(scores)
    got = np.array(weights[0], dtype=np.float64)
    want = np.exp(x.astype(np.float64) - x.max())
    assert np.max(np.abs(got / want - 1)) < 1e-5
    assert float(sums[0, 0]) == pytest.approx(want.sum(), rel=1e-5)


def test_scores_below_the_floor_weigh_at_most_e_minus_30():
    scores = mx.array([[0.0, -31.0, -500.0, -1e30, -3.0e38]])
    weights, _ = cpu_attention.softmax_weights(scores)
    values = np.array(weights[0])
    assert values[0] == pytest.approx(1.0, rel=1e-6)
    assert np.all(values[1:] <= np.exp(-30) * 1.001)
    assert np.all(np.isfinite(values))


@pytest.mark.parametrize(
    "heads,kv_heads,queries,keys",
    [(8, 2, 1, 1000), (8, 2, 37, 300), (14, 2, 64, 700), (4, 4, 5, 5)],
)
def test_dense_attention_equals_mlx_fused_attention(heads, kv_heads, queries, keys):
    q, k, v = _qkv(heads, kv_heads, queries, keys)
    mask = "causal" if queries > 1 else None
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=SCALE, mask=mask)
    got = cpu_attention.attention(q, k, v, SCALE, mask)
    assert got.shape == want.shape
    assert _max_difference(got, want) < 1e-5


def test_long_query_blocks_are_split_without_changing_the_result(monkeypatch):
    q, k, v = _qkv(8, 2, 200, 900)
    whole = cpu_attention.attention(q, k, v, SCALE, "causal")
    monkeypatch.setattr(cpu_attention, "SCORE_BLOCK_ELEMENTS", 8 * 900 * 40)
    assert cpu_attention._query_block(8, 200, 900) == 32
    split = cpu_attention.attention(q, k, v, SCALE, "causal")
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=SCALE, mask="causal")
    assert _max_difference(split, whole) < 1e-5
    assert _max_difference(split, want) < 1e-5


@pytest.mark.parametrize("form", ["bool 2-D", "bool 4-D", "additive"])
def test_array_masks_follow_mlx_semantics(form):
    q, k, v = _qkv(8, 2, 6, 20)
    allowed = mx.random.uniform(shape=(6, 20)) > 0.3
    allowed[:, 0] = True
    mask = {
        "bool 2-D": allowed,
        "bool 4-D": mx.broadcast_to(allowed, (1, 8, 6, 20)),
        "additive": mx.where(allowed, 0.0, -1e9),
    }[form]
    want = mx.fast.scaled_dot_product_attention(q, k, v, scale=SCALE, mask=mask)
    assert _max_difference(cpu_attention.attention(q, k, v, SCALE, mask), want) < 1e-5


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("queries,keys", [(1, 1000), (1, 64), (37, 300), (128, 512)])
def test_quantized_attention_equals_mlx_lm_quantized_attention(bits, queries, keys):
    q, k, v = _qkv(8, 2, queries, keys, seed=bits)
    q_keys = mx.quantize(k, group_size=64, bits=bits)
    q_values = mx.quantize(v, group_size=64, bits=bits)
    mask = "causal" if queries > 1 else None
    want = _mlx_lm_quantized(q, q_keys, q_values, mask, bits)
    got = cpu_attention.quantized_attention(q, q_keys, q_values, SCALE, mask, 64, bits)
    assert got.shape == want.shape
    assert _max_difference(got, want) < 1e-5


def test_install_routes_mlx_lm_attention_and_uninstall_restores_it():
    cpu_attention.uninstall()
    try:
        assert llama.scaled_dot_product_attention is not (
            cpu_attention.scaled_dot_product_attention
        )
        assert cpu_attention.install() >= 1
        assert cpu_attention.installed()
        assert llama.scaled_dot_product_attention is (
            cpu_attention.scaled_dot_product_attention
        )
        assert base.scaled_dot_product_attention is (
            cpu_attention.scaled_dot_product_attention
        )
        cpu_attention.uninstall()
        assert llama.scaled_dot_product_attention is not (
            cpu_attention.scaled_dot_product_attention
        )
    finally:
        cpu_attention.install()


def test_sinks_and_half_precision_keep_mlx_lm_attention():
    q, k, v = _qkv(4, 2, 3, 10)
    sinks = mx.zeros((4,))
    want = mx.fast.scaled_dot_product_attention(
        q, k, v, scale=SCALE, mask="causal", sinks=sinks
    )
    got = cpu_attention.scaled_dot_product_attention(
        q, k, v, KVCache(), SCALE, "causal", sinks=sinks
    )
    assert _max_difference(got, want) < 1e-6
    half = [a.astype(mx.float16) for a in (q, k, v)]
    got16 = cpu_attention.scaled_dot_product_attention(*half, None, SCALE, "causal")
    want16 = mx.fast.scaled_dot_product_attention(*half, scale=SCALE, mask="causal")
    assert got16.dtype == mx.float16
    assert _max_difference(got16, want16) == 0.0


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    return load_model_folder(tiny_model_dir).model


def _run(model, prompt, bits, steps, ours: bool):
    """Logits of a prompt and of greedy steps after it, with a cache quantized at once."""
    if ours:
        cpu_attention.install()
    else:
        cpu_attention.uninstall()
    # float32 caches: mlx-lm's quantized attention rounds through 16-bit scales, which
    # would measure its rounding, not the two attentions (16-bit storage:
    # tests/core/engine/cache/test_kv_storage.py).
    storing = kv_storage.storing(None)
    storing.__enter__()
    try:
        cache = [KVCache() for _ in model.layers]
        logits = model(mx.array(prompt)[None], cache=cache)
        if bits != 16:
            cache = [layer.to_quantized(group_size=64, bits=bits) for layer in cache]
        # A second chunk attends to the quantized cache with many queries (a warm turn).
        logits = model(mx.array(prompt[:40])[None], cache=cache)
        rows = [logits[0, -1]]
        token = mx.argmax(logits[0, -1])
        for _ in range(steps):
            logits = model(token.reshape(1, 1), cache=cache)
            rows.append(logits[0, -1])
            token = mx.argmax(logits[0, -1])
        out = mx.stack(rows)
        mx.eval(out)
        return np.array(out)
    finally:
        storing.__exit__(None, None, None)
        cpu_attention.install()


@pytest.mark.parametrize("bits", [16, 8, 4])
def test_model_logits_and_greedy_tokens_match_mlx_lm_attention(tiny_model, bits):
    assert cpu_attention.installed()  # the backend decision installed it on load
    prompt = [(i * 37) % 1000 + 3 for i in range(300)]
    ours = _run(tiny_model, prompt, bits, 24, ours=True)
    theirs = _run(tiny_model, prompt, bits, 24, ours=False)
    assert np.max(np.abs(ours - theirs)) < 1e-4
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1)).all()


def test_the_backend_installs_the_cpu_path_only_without_metal():
    assert not backend.uses_metal()
    assert cpu_attention.installed()


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("dim,group", [(64, 32), (128, 32), (128, 64), (128, 128)])
def test_decode_over_every_group_layout_equals_mlx_lm(bits, dim, group):
    mx.random.seed(dim + group + bits)
    q = mx.random.normal((1, 8, 1, dim))
    k = mx.random.normal((1, 2, 300, dim))
    v = mx.random.normal((1, 2, 300, dim))
    q_keys = mx.quantize(k, group_size=group, bits=bits)
    q_values = mx.quantize(v, group_size=group, bits=bits)
    want = cpu_attention.MLX_LM_QUANTIZED_SDPA(
        mx.array(q), q_keys, q_values, SCALE, None, group_size=group, bits=bits
    )
    got = cpu_attention.quantized_attention(
        q, q_keys, q_values, SCALE, None, group, bits
    )
    assert _max_difference(got, want) < 1e-5


def test_other_bit_widths_decode_through_mlx_quantized_matmul():
    q, k, v = _qkv(8, 2, 1, 200)
    q_keys = mx.quantize(k, group_size=64, bits=6)
    q_values = mx.quantize(v, group_size=64, bits=6)
    want = _mlx_lm_quantized(q, q_keys, q_values, None, 6)
    got = cpu_attention.quantized_attention(q, q_keys, q_values, SCALE, None, 64, 6)
    assert _max_difference(got, want) < 1e-5


@pytest.mark.parametrize("bits", [8, 4])
def test_decode_handles_values_narrower_than_keys(bits):
    # mlx-lm's own quantized attention assumes equal widths; compare with the dense
    # attention over the dequantized cache instead.
    mx.random.seed(bits)
    q = mx.random.normal((1, 8, 1, 128))
    k = mx.random.normal((1, 2, 300, 128))
    v = mx.random.normal((1, 2, 300, 64))
    q_keys = mx.quantize(k, group_size=64, bits=bits)
    q_values = mx.quantize(v, group_size=64, bits=bits)
    want = mx.fast.scaled_dot_product_attention(
        q,
        mx.dequantize(*q_keys, group_size=64, bits=bits),
        mx.dequantize(*q_values, group_size=64, bits=bits),
        scale=SCALE,
    )
    got = cpu_attention.quantized_attention(q, q_keys, q_values, SCALE, None, 64, bits)
    assert got.shape == (1, 8, 1, 64)
    assert _max_difference(got, want) < 1e-5
