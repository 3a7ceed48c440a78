"""The native KV products (`kv_kernel`, native/qkv.cpp) against MLX, and in the engine.

Skipped, with the reason, where the kernel cannot be built or on Metal.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from app.core.engine.cpu import (
    backend,
    cpu_attention,
    kv_kernel,
    native_build,
    native_kernel,
)
from app.core.engine.cpu.quantized_products import KVPart, TieredKV

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)


@pytest.fixture(scope="module")
def kernel(native_built):
    kv_kernel.state.cache_clear()
    state = kv_kernel.state()
    assert state.used, state.reason
    module = native_kernel.load_module()
    yield module
    module.force_scalar(False)
    kv_kernel.switch(True)


def _stored(rng, bits: int, group: int, scale_dtype, dim: int, tokens: int):
    """A cache's keys as stored: a slice of a larger allocation, as a live cache has."""
    full = mx.array(rng.standard_normal((1, 3, tokens + 37, dim)).astype(np.float32))
    if bits == 16:
        return full.astype(scale_dtype)[:, :, :tokens]
    packed = mx.quantize(full.astype(scale_dtype), group_size=group, bits=bits)
    return [x[:, :, :tokens] for x in packed]


def _dense(stored, bits: int, group: int) -> mx.array:
    if bits == 16:
        return stored.astype(mx.float32)
    weights, scales, biases = stored
    return mx.dequantize(
        weights, scales.astype(mx.float32), biases.astype(mx.float32), group, bits
    )


CASES = [(16, 64, dt) for dt in (mx.float32, mx.float16, mx.bfloat16)] + [
    (bits, group, dt)
    for bits in (8, 4)
    for group in (32, 64, 128)
    for dt in (mx.float32, mx.float16, mx.bfloat16)
]


@pytest.mark.parametrize("scalar", [False, True], ids=["dispatched", "scalar"])
@pytest.mark.parametrize(("bits", "group", "dtype"), CASES)
def test_scores_and_values_match_mlx(kernel, scalar, bits, group, dtype):
    rng = np.random.default_rng(bits * 7 + group)
    kernel.force_scalar(scalar)
    try:
        for rows, dim, tokens in ((7, 128, 300), (3, 256, 65), (9, 128, 1)):
            stored = _stored(rng, bits, group, dtype, dim, tokens)
            dense = _dense(stored, bits, group)
            queries = mx.array(
                rng.standard_normal((1, 3, rows, dim)).astype(np.float32)
            )
            weights = mx.softmax(
                mx.array(rng.standard_normal((1, 3, rows, tokens)).astype(np.float32)),
                axis=-1,
            )
            scores = kv_kernel.scores(queries, stored, bits, group)
            values = kv_kernel.values(weights, stored, bits, group)
            assert scores is not None and values is not None
            expected_scores = queries @ dense.swapaxes(-1, -2)
            expected_values = weights @ dense
            bound = 1e-4 * (1.0 + float(mx.abs(expected_scores).max()))
            assert float(mx.abs(scores - expected_scores).max()) <= bound
            assert float(mx.abs(values - expected_values).max()) <= 1e-5
    finally:
        kernel.force_scalar(False)


def test_uncovered_cases_fall_back(kernel):
    queries = mx.zeros((1, 2, 4, 64))
    packed = mx.quantize(mx.zeros((1, 2, 10, 64)), group_size=64, bits=6)
    assert kv_kernel.scores(queries, packed, 6, 64) is None
    assert (
        kv_kernel.scores(queries.astype(mx.float16), mx.zeros((1, 2, 10, 64)), 16, 64)
        is None
    )
    kv_kernel.switch(False)
    assert kv_kernel.scores(queries, mx.zeros((1, 2, 10, 64)), 16, 64) is None
    kv_kernel.switch(True)


@pytest.mark.parametrize("bits", [16, 8, 4])
def test_decode_attention_is_the_same_with_and_without_the_kernel(kernel, bits):
    rng = np.random.default_rng(bits)
    queries = mx.array(rng.standard_normal((1, 21, 1, 64)).astype(np.float32))
    keys = _stored(rng, bits, 64, mx.float16, 64, 777)
    values = _stored(rng, bits, 64, mx.float16, 64, 777)
    part = KVPart(keys, values, key_bits=bits, value_bits=bits, group_size=64)
    assert _kernel_against_mlx(queries, part, None) < 1e-5


def _kernel_against_mlx(queries, part, mask) -> float:
    """Largest difference of tiered attention with the kernel and without it."""
    outputs = {}
    for on in (True, False):
        kv_kernel.switch(on)
        try:
            outputs[on] = cpu_attention.tiered_attention(
                queries, TieredKV([part]), 0.125, mask
            )
        finally:
            kv_kernel.switch(True)
    return float(mx.abs(outputs[True] - outputs[False]).max())


@pytest.mark.parametrize(("bits", "group"), [(8, 64), (4, 32), (8, 32), (4, 64)])
def test_a_prefill_widens_the_cache_with_the_kernel(kernel, bits, group):
    rng = np.random.default_rng(100 + bits + group)
    keys = _stored(rng, bits, group, mx.float16, 64, 301)  # a view, as a live cache
    wide = kv_kernel.dequantize(keys, bits, group)
    assert wide is not None and wide.dtype == mx.float32
    assert wide.shape == (1, 3, 301, 64)
    # Float32 scales, as the decode products read them: equal to MLX's then.
    assert float(mx.abs(wide - _dense(keys, bits, group)).max()) == 0.0
    kv_kernel.switch(False)
    try:
        assert kv_kernel.dequantize(keys, bits, group) is None
    finally:
        kv_kernel.switch(True)
    assert kv_kernel.dequantize(keys, 3, group) is None  # not a kernel format


@pytest.mark.parametrize("bits", [8, 4])
def test_prefill_attention_over_a_quantized_cache_is_the_same_with_the_kernel(
    kernel, bits
):
    rng = np.random.default_rng(200 + bits)
    queries = mx.array(rng.standard_normal((1, 21, 40, 64)).astype(np.float32))
    keys = _stored(rng, bits, 64, mx.float16, 64, 300)
    values = _stored(rng, bits, 64, mx.float16, 64, 300)
    part = KVPart(keys, values, key_bits=bits, value_bits=bits, group_size=64)
    # MLX widens at the scales' float16, the kernel at float32: one float16 rounding.
    assert _kernel_against_mlx(queries, part, "causal") < 5e-3


def test_bad_arguments_raise_value_error(kernel):
    with pytest.raises(ValueError, match="bits must be 16, 8 or 4"):
        kernel.kv_scores(
            mx.zeros((1, 1, 1, 64)), mx.zeros((1, 1, 4, 64)), None, None, 64, 5
        )
    with pytest.raises(ValueError, match="shapes do not match"):
        kernel.kv_values(
            mx.zeros((1, 1, 1, 5)), mx.zeros((1, 1, 4, 64)), None, None, 64, 16
        )
    with pytest.raises(ValueError, match="scales and biases"):
        kernel.kv_scores(
            mx.zeros((1, 1, 1, 64)),
            mx.zeros((1, 1, 4, 16), mx.uint32),
            None,
            None,
            64,
            8,
        )


def test_the_engine_stores_float16_when_the_kernel_reads_it(kernel, tiny_model_dir):
    from app.core.engine.cache import kv_storage
    from app.core.engine.loader import load_model_folder

    load_model_folder(tiny_model_dir)
    assert kv_storage.storage_dtype() == mx.float16


def test_without_a_build_the_cache_is_bfloat16(tiny_model_dir, tmp_path, monkeypatch):
    from app.core.engine.cache import kv_storage
    from app.core.engine.loader import load_model_folder

    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path / "empty"))
    native_kernel.load_module.cache_clear()
    try:
        load_model_folder(tiny_model_dir)
        assert not kv_kernel.used()
        assert kv_storage.storage_dtype() == mx.bfloat16
    finally:
        monkeypatch.undo()
        native_kernel.load_module.cache_clear()
        kv_kernel.state.cache_clear()
