"""The kernel's widening of quantized weights (``dequantize_f32``) against MLX's own,
and the product's column slices of long rows, on every SIMD path this CPU has.

Skipped, with the reason, where the kernel cannot be built or on Metal.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from app.core.engine.cpu import backend, native_kernel

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)

PATHS = ["avx512", "avx2", "scalar"]


def _forced(kernel, path):
    if path not in kernel.simd_paths():
        pytest.skip(f"this CPU has no {path} path")
    kernel.force_path(path)


def _quantized(rng, n: int, k: int, group: int, bits: int):
    weights = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    return mx.quantize(weights, group_size=group, bits=bits)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_dequantize_is_mlx_dequantize_bit_for_bit(kernel, path, bits, group):
    # Random shapes: 1-90 rows, 1-7 groups a row. Each weight rounds as MLX's does
    # (q * scale, then + bias; no fused multiply-add), so the widened layer equals
    # mx.dequantize's exactly and the BLAS product after it is MLX's own.
    rng = np.random.default_rng(bits * 1000 + group + PATHS.index(path))
    _forced(kernel, path)
    try:
        for _ in range(6):
            n = int(rng.integers(1, 91))
            k = group * int(rng.integers(1, 8))
            packed, scales, biases = _quantized(rng, n, k, group, bits)
            got = kernel.dequantize_f32(packed, scales, biases, group, bits)
            expected = mx.dequantize(packed, scales, biases, group, bits)
            assert got.shape == (n, k)
            assert got.dtype == mx.float32
            assert mx.array_equal(got, expected).item(), (n, k)
    finally:
        kernel.force_path("auto")


def test_half_precision_scales_are_widened_first(kernel):
    # A model file's bfloat16 scales: widened to float32 before use, as the product
    # and the CPU backend's float32 path do (not rounded to bfloat16 like MLX's result
    # at bfloat16 scales).
    rng = np.random.default_rng(2)
    packed, scales, biases = _quantized(rng, 40, 256, 64, 4)
    half = (scales.astype(mx.bfloat16), biases.astype(mx.bfloat16))
    got = kernel.dequantize_f32(packed, *half, 64, 4)
    wide = tuple(h.astype(mx.float32) for h in half)
    assert got.dtype == mx.float32
    assert mx.array_equal(got, mx.dequantize(packed, *wide, 64, 4)).item()


@pytest.mark.parametrize("path", PATHS)
def test_threads_over_rows_give_the_same_widening(kernel, path):
    rng = np.random.default_rng(4)
    packed, scales, biases = _quantized(rng, 3001, 512, 64, 4)
    _forced(kernel, path)
    try:
        one = kernel.dequantize_f32(packed, scales, biases, 64, 4)
        mx.eval(one)
        for threads in (2, 3):
            kernel.set_threads(threads)
            many = kernel.dequantize_f32(packed, scales, biases, 64, 4)
            assert mx.array_equal(one, many).item()
    finally:
        kernel.set_threads(1)
        kernel.force_path("auto")


@pytest.mark.parametrize(
    ("bits", "group", "scale_rows", "dtype", "message"),
    [
        (3, 64, 8, mx.uint32, "bits"),
        (4, 48, 8, mx.uint32, "group"),
        (4, 64, 7, mx.uint32, r"\(N, K/group\)"),
        (4, 64, 8, mx.int32, "uint32"),
    ],
)
def test_bad_arguments_raise_value_error(
    kernel, bits, group, scale_rows, dtype, message
):
    packed, scales, biases = mx.quantize(mx.ones((8, 128)), group_size=64, bits=4)
    with pytest.raises(ValueError, match=message):
        kernel.dequantize_f32(
            packed.astype(dtype), scales[:scale_rows], biases[:scale_rows], group, bits
        )


@pytest.mark.parametrize(
    "algebra", [None, True, False], ids=["auto", "algebra", "rebuilt"]
)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", [4, 8])
def test_long_rows_are_multiplied_in_column_slices_exactly(kernel, path, algebra, bits):
    # 8 input rows of 4,864 columns (qwen05's down projection) are 152 KiB, more than
    # a slice of the input the kernel keeps in L1 (32 KiB): the columns are split
    # and the slices' products added. 3, 8, 11 and 19 rows: one partial pass, one
    # full, and several passes with a partial last one.
    rng = np.random.default_rng(bits + PATHS.index(path))
    group = 64
    packed, scales, biases = _quantized(rng, 37, 4864, group, bits)
    _forced(kernel, path)
    kernel.force_algebra(algebra)
    try:
        for rows in (3, 8, 11, 19):
            x = mx.array(rng.standard_normal((rows, 4864)).astype(np.float32))
            expected = mx.quantized_matmul(
                x, packed, scales, biases, transpose=True, group_size=group, bits=bits
            )
            got = kernel.quantized_matvec(x, packed, scales, biases, group, bits)
            bound = 1e-5 * (1.0 + float(mx.abs(expected).max())) * 4864**0.5
            assert float(mx.abs(got - expected).max()) <= bound, rows
    finally:
        kernel.force_path("auto")
        kernel.force_algebra(None)


def test_long_inputs_take_the_widened_layer_and_equal_blas_on_it(kernel):
    # Past KERNEL_ROWS rows the layer is widened by dequantize_f32 and multiplied by
    # BLAS: the result is then exactly the float32 matmul on mx.dequantize's weights.
    rng = np.random.default_rng(9)
    packed, scales, biases = _quantized(rng, 70, 192, 64, 4)
    rows = native_kernel.KERNEL_ROWS + 3
    x = mx.array(rng.standard_normal((rows, 192)).astype(np.float32))
    got = native_kernel._project(x, packed, scales, biases, 64, 4)
    expected = x @ mx.dequantize(packed, scales, biases, 64, 4).T
    assert got.shape == (rows, 70)
    assert mx.array_equal(got, expected).item()


def test_the_self_test_covers_the_widening(kernel, monkeypatch):
    # A widening that disagrees with mx.dequantize fails the self-test by name.
    import mlx.nn as nn

    layer = nn.QuantizedLinear(256, 300, bias=False, group_size=64, bits=4)
    layer.set_dtype(mx.float32)

    class Broken:
        def __getattr__(self, name):
            return getattr(kernel, name)

        @staticmethod
        def dequantize_f32(*args):
            return kernel.dequantize_f32(*args) + 1.0

    assert native_kernel.self_test(layer) is None
    monkeypatch.setattr(native_kernel, "_kernel", lambda: Broken())
    failed = native_kernel.self_test(layer)
    assert failed is not None and "mx.dequantize" in failed
