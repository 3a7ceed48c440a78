"""The native decode block against the blocks' own code, on real built models.

Skipped, with the reason, where the native kernel cannot be built or on Metal.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx_lm.models.cache import QuantizedKVCache, make_prompt_cache

from app.core.engine.cpu import backend, decode_block, native_kernel

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)

PROMPT = [5, 17, 99, 3, 250, 41, 7, 600, 12, 18, 44, 301]


@pytest.fixture(scope="module", params=["llama-4", "qwen2-4", "qwen2-8"])
def loaded(request, native_built, tmp_path_factory):
    from app.core.engine.loader import load_model_folder
    from app.core.modelkit.model_builder import build_model

    arch, bits = request.param.split("-")
    folder = tmp_path_factory.mktemp("models") / request.param
    build_model(folder, shape="tiny", bits=int(bits), seed=3, arch=arch)
    return load_model_folder(folder)


@pytest.fixture(autouse=True)
def _switched_back():
    yield
    decode_block.switch(True)


def _decode(model, on: bool, cache_kind: str, steps: int = 8):
    decode_block.switch(on)
    if cache_kind == "8-bit":
        cache = [QuantizedKVCache(group_size=64, bits=8) for _ in model.model.layers]
    else:
        cache = make_prompt_cache(model)
    model(mx.array(PROMPT[:-1])[None], cache=cache)
    token = mx.array(PROMPT[-1:])
    tokens, logits = [], []
    for _ in range(steps):
        out = model(token[None], cache=cache)[:, -1, :]
        token = mx.argmax(out, axis=-1)
        tokens.append(int(token.item()))
        logits.append(out)
    return tokens, mx.concatenate(logits)


@pytest.mark.parametrize("cache_kind", ["16-bit", "8-bit"])
def test_fused_decode_equals_the_blocks_own_code(loaded, cache_kind):
    model = loaded.model
    assert backend.kernel_state().used
    assert all(decode_block.unfit_reason(b) is None for b in model.model.layers)
    assert all(decode_block.routed(b) for b in model.model.layers)
    fused_tokens, fused = _decode(model, True, cache_kind)
    own_tokens, own = _decode(model, False, cache_kind)
    assert fused_tokens == own_tokens
    scale = float(mx.abs(own).max()) + 1.0
    assert float(mx.abs(fused - own).max()) <= 1e-4 * scale


def _graph_text(array: mx.array, folder) -> str:
    path = folder / "graph.dot"
    mx.export_to_dot(str(path), array)
    return path.read_text()


def test_a_decode_token_is_three_nodes_a_block(loaded, tmp_path):
    model = loaded.model
    cache = make_prompt_cache(model)
    model(mx.array(PROMPT[:-1])[None], cache=cache)
    mx.eval([layer.state for layer in cache])
    graphs = []
    for on in (True, False):
        decode_block.switch(on)
        logits = model(mx.array(PROMPT[-1:])[None], cache=cache)
        graphs.append(_graph_text(logits, tmp_path))
        mx.eval(logits, [layer.state for layer in cache])  # the next graph starts here
        for layer in cache:
            layer.trim(1)
    fused, own = graphs
    layers = len(model.model.layers)
    assert fused.count("SwaplessDecodeQKV") == layers
    assert fused.count("SwaplessDecodeMLP") == layers
    assert "SwaplessDecode" not in own
    assert fused.count("->") < own.count("->") / 2


def test_a_prefill_takes_the_blocks_own_code(loaded):
    # Several tokens: the block's own path (no native node in the graph).
    model = loaded.model
    cache = make_prompt_cache(model)[0]
    block = model.model.layers[0]
    x = mx.random.normal((1, 4, model.args.hidden_size))
    decode_block.switch(True)
    fused = block(x, None, cache)
    cache.trim(cache.offset)
    decode_block.switch(False)
    own = block(x, None, cache)
    assert mx.array_equal(fused, own)


def test_install_routes_every_fitting_block_once(loaded):
    assert decode_block.install(loaded.model) == len(loaded.model.model.layers)


def test_the_environment_switch_keeps_the_blocks_own_code(loaded, monkeypatch):
    monkeypatch.setenv(decode_block.DISABLE_ENV, "0")
    assert decode_block.install(loaded.model) == 0


def test_a_block_outside_the_families_is_left_alone(loaded):
    class OtherRoPE(nn.RoPE):
        pass

    block = loaded.model.model.layers[0]
    rope = block.self_attn.rope
    block.self_attn.rope = OtherRoPE(rope.dims, rope.traditional, rope.base)
    try:
        assert "RoPE variant OtherRoPE" in (decode_block.unfit_reason(block) or "")
    finally:
        block.self_attn.rope = rope
    assert "not a known family" in (decode_block.unfit_reason(nn.Linear(4, 4)) or "")


def _projection(rng, n: int, k: int, bias: bool) -> list[mx.array]:
    weights = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    packed = list(mx.quantize(weights, group_size=32, bits=4))
    if bias:
        packed.append(mx.array(rng.standard_normal(n).astype(np.float32)))
    return packed


def _reference_mlp(attention, residual, o, norm, gate, up, down):
    def project(x, p):
        y = mx.quantized_matmul(x, *p[:3], group_size=32, bits=4)
        return y + p[3] if len(p) == 4 else y

    h = residual + project(attention, o)
    n = mx.fast.rms_norm(h, norm, 1e-5)
    return h + project(nn.silu(project(n, gate)) * project(n, up), down)


def test_a_strided_activation_is_read_through_its_strides(native_built):
    kernel = native_kernel.load_module()
    rng = np.random.default_rng(5)
    o, gate, up, down = (
        _projection(rng, 64, 96, True),
        _projection(rng, 128, 64, False),
        _projection(rng, 128, 64, False),
        _projection(rng, 64, 128, True),
    )
    norm = mx.array(rng.standard_normal(64).astype(np.float32))
    residual = mx.array(rng.standard_normal((1, 1, 64)).astype(np.float32))
    # (1, 96) taken as a column of a (96, 3) matrix: a view with stride 3.
    wide = mx.array(rng.standard_normal((96, 3)).astype(np.float32))
    attention = wide[:, 1].reshape(1, 1, 96)
    got = kernel.decode_mlp(attention, residual, o, norm, 1e-5, gate, up, down, 32, 4)
    expected = _reference_mlp(attention, residual, o, norm, gate, up, down)
    assert got.shape == residual.shape
    assert float(mx.abs(got - expected).max()) <= 1e-4 * (
        1.0 + float(mx.abs(expected).max())
    )


def test_bad_shapes_are_refused_in_words(native_built):
    kernel = native_kernel.load_module()
    rng = np.random.default_rng(6)
    q = _projection(rng, 64, 64, False)
    norm = mx.ones((32,))
    x = mx.zeros((1, 1, 64))
    with pytest.raises(ValueError, match="norm's width"):
        kernel.decode_qkv(x, norm, 1e-5, q, q, q, 32, 4, 2, 2, 32, False, 1e4, 1.0, 0)
    with pytest.raises(ValueError, match="heads"):
        kernel.decode_qkv(
            x, mx.ones((64,)), 1e-5, q, q, q, 32, 4, 3, 2, 32, False, 1e4, 1.0, 0
        )


@pytest.mark.parametrize(
    ("traditional", "dims", "scale"),
    [(False, 32, 1.0), (True, 32, 1.0), (False, 16, 0.25), (True, 16, 2.0)],
)
def test_q_k_v_equal_norm_projections_and_rope(native_built, traditional, dims, scale):
    # RoPE variants the model tests do not reach: traditional pairs, a partial
    # rotation (dims < head size), a position scale.
    kernel = native_kernel.load_module()
    rng = np.random.default_rng(dims + int(traditional))
    heads, kv_heads, head_dim, hidden = 4, 2, 32, 64
    q = _projection(rng, heads * head_dim, hidden, True)
    k = _projection(rng, kv_heads * head_dim, hidden, True)
    v = _projection(rng, kv_heads * head_dim, hidden, False)
    norm = mx.array(rng.standard_normal(hidden).astype(np.float32))
    x = mx.array(rng.standard_normal((1, 1, hidden)).astype(np.float32))
    offset, base = 777, 10000.0
    got = kernel.decode_qkv(
        x, norm, 1e-6, q, k, v, 32, 4, heads, kv_heads,
        dims, traditional, base, scale, offset,
    )  # fmt: skip
    n = mx.fast.rms_norm(x, norm, 1e-6)

    def project(p, count):
        y = mx.quantized_matmul(n, *p[:3], group_size=32, bits=4)
        y = y + p[3] if len(p) == 4 else y
        return y.reshape(1, 1, count, head_dim).transpose(0, 2, 1, 3)

    def rope(t):
        return mx.fast.rope(
            t, dims, traditional=traditional, base=base, scale=scale, offset=offset
        )

    expected = [
        rope(project(q, heads)),
        rope(project(k, kv_heads)),
        project(v, kv_heads),
    ]
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape
        assert float(mx.abs(g - e).max()) <= 1e-4 * (1.0 + float(mx.abs(e).max()))
