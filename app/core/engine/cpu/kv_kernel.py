"""Decode attention's scores and weighted values read from the cache as stored.

The native kernel (`native/qkv.cpp`, built with the quantized-weights kernel by
`native_build`) computes ``q @ K^T`` and ``p @ V`` per KV head over keys and values as
the cache holds them: 16-bit floats (`kv_storage`) or MLX affine 8/4-bit with their
scales and biases, widened in registers and read through the cache's own strides (the
slice of a 256-token allocation is never copied). Without it, `quantized_products`
keeps working on the integers through BLAS, and dense 16-bit parts are widened by MLX.

The kernel serves a product only after a self-test against MLX's own ``dequantize``
and matmul on random caches of every kind it covers (`state`).
"""

from __future__ import annotations

from functools import lru_cache
from typing import cast

import mlx.core as mx

from app.core.engine.cpu import decode_block, native_build
from app.core.engine.cpu.native_kernel import KernelState, load_module
from app.core.engine.cpu.softmax_weights import softmax_weights

GROUPS = (32, 64, 128)
"""Quantization groups the kernel reads."""
QUANTIZED_BITS = (8, 4)
FLOAT_DTYPES = (mx.float32, mx.float16, mx.bfloat16)
TOLERANCE = 1e-4
"""Self-test bound on the error relative to the largest reference output (+1)."""


_switched_on = True


def switch(on: bool) -> None:
    """Let the kernel serve decode attention (True) or keep MLX's path (the bench and
    the tests compare both in one process)."""
    global _switched_on
    _switched_on = on


def _covers(bits: int, group: int, x) -> bool:
    if bits == 16:
        return (
            isinstance(x, mx.array) and x.dtype in FLOAT_DTYPES and x.shape[-1] % 8 == 0
        )
    return (
        bits in QUANTIZED_BITS
        and group in GROUPS
        and isinstance(x, tuple | list)
        and x[1].dtype in FLOAT_DTYPES
    )


def _call(name: str, rows: mx.array, stored, bits: int, group: int) -> mx.array:
    function = getattr(load_module(), name)
    if bits == 16:
        return function(rows, stored, None, None, group, 16)
    weights, scales, biases = stored
    return function(rows, weights, scales, biases, group, bits)


def _reference(name: str, rows: mx.array, stored, bits: int, group: int) -> mx.array:
    if bits == 16:
        dense = stored.astype(mx.float32)
    else:
        weights, scales, biases = stored
        dense = mx.dequantize(
            weights,
            scales.astype(mx.float32),
            biases.astype(mx.float32),
            group_size=group,
            bits=bits,
        )
    return rows @ dense.swapaxes(-1, -2) if name == "kv_scores" else rows @ dense


def self_test(seed: int = 0) -> str | None:
    """Compare both products with MLX on every covered kind; None when all agree.

    The caches are slices of larger allocations (as a live cache hands them over), with
    7 query rows per head (a GQA group) and 2 heads.
    """
    key = mx.random.key(seed)
    for dim in (64, 128):
        key, k1, k2, k3 = mx.random.split(key, 4)
        full = mx.random.normal((1, 2, 300, dim), key=k1)
        queries = mx.random.normal((1, 2, 7, dim), key=k2)
        weights = mx.softmax(mx.random.normal((1, 2, 7, 257), key=k3), axis=-1)
        cases: list[tuple[int, int, object]] = [
            (16, 64, full.astype(dtype)[:, :, :257]) for dtype in FLOAT_DTYPES
        ]
        for bits in QUANTIZED_BITS:
            for group in (g for g in GROUPS if dim % g == 0):
                for dtype in (mx.float32, mx.float16):
                    packed = mx.quantize(
                        full.astype(dtype), group_size=group, bits=bits
                    )
                    cases.append((bits, group, [x[:, :, :257] for x in packed]))
        for bits, group, stored in cases:
            for name, rows in (("kv_scores", queries), ("kv_values", weights)):
                got = _call(name, rows, stored, bits, group)
                expected = _reference(name, rows, stored, bits, group)
                error = float(mx.abs(got - expected).max())
                scale = float(mx.abs(expected).max()) + 1.0
                if not error <= TOLERANCE * scale:
                    return (
                        f"{name} at {bits} bits, group {group}, head size {dim}: "
                        f"error {error:.3g}"
                    )
    return None


@lru_cache(maxsize=1)
def state() -> KernelState:
    """Whether decode attention reads the cache through the kernel, and why.

    Cached (attention asks every layer and token); loading a model clears it.
    """
    if native_build.disabled():
        return KernelState(False, f"switched off ({native_build.DISABLE_ENV}=0)")
    built = native_build.state()
    if built.path is None:
        return KernelState(False, built.reason)
    try:
        module = load_module()
        if module is None or not hasattr(module, "kv_scores"):
            return KernelState(False, "the built kernel has no KV products")
        failed = self_test()
    except Exception as exc:  # a build against another MLX/nanobind fails in many ways
        return KernelState(False, f"KV products unusable ({type(exc).__name__}: {exc})")
    if failed is not None:
        return KernelState(False, f"KV self-test failed: {failed}")
    return KernelState(True, "used (self-test passed)")


def used() -> bool:
    """True when the kernel serves decode attention (runs the self-test once)."""
    return _switched_on and state().used


def scores(folded: mx.array, keys, bits: int, group: int) -> mx.array | None:
    """``folded @ K^T`` through the kernel, or None when it does not cover this case.

    Args:
        folded: ``(B, H_kv, R, D)`` float32 query rows.
        keys: Dense ``(B, H_kv, T, D)`` keys, or ``mx.quantize``'s triple of them.
        bits: 16 for dense keys, else their bits.
        group: Their quantization group (ignored when dense).
    """
    if folded.dtype != mx.float32 or not _covers(bits, group, keys) or not used():
        return None
    return _call("kv_scores", folded, keys, bits, group)


def values(weights: mx.array, stored, bits: int, group: int) -> mx.array | None:
    """``weights @ V`` through the kernel, or None when it does not cover this case.

    Args:
        weights: ``(B, H_kv, R, T)`` float32 attention weights.
        stored: Dense ``(B, H_kv, T, D)`` values, or ``mx.quantize``'s triple of them.
        bits: 16 for dense values, else their bits.
        group: Their quantization group (ignored when dense).
    """
    if weights.dtype != mx.float32 or not _covers(bits, group, stored) or not used():
        return None
    return _call("kv_values", weights, stored, bits, group)


def dequantize(stored, bits: int, group: int) -> mx.array | None:
    """A quantized cache part widened to float32 by the kernel, or None.

    A prefill chunk widens the whole quantized cache it attends to, in every layer:
    MLX's CPU ``dequantize`` is scalar (147 ms for the keys and values of qwen05's 24
    layers at 2,100 tokens, 8-bit; the kernel's ``dequantize_f32`` 2.7 ms), and a
    turn's prefill takes several chunks. The scales are widened to float32 first, as
    the decode products read them (MLX computes at the scales' float16).

    Args:
        stored: ``mx.quantize``'s (weights, scales, biases) of ``(..., T, D)``.
        bits: Their bits.
        group: Their quantization group.

    Returns:
        ``(..., T, D)`` float32, or None when the kernel is not used or does not cover
        this case.
    """
    if not _covers(bits, group, stored) or not used() or stored[0].size == 0:
        return None
    module = load_module()
    assert module is not None  # `used` says it is loaded
    weights, scales, biases = stored
    wide = module.dequantize_f32(
        weights.reshape(-1, weights.shape[-1]),
        scales.reshape(-1, scales.shape[-1]),
        biases.reshape(-1, biases.shape[-1]),
        group,
        bits,
    )
    return wide.reshape(*weights.shape[:-1], wide.shape[-1])


def softmax(scores: mx.array) -> tuple[mx.array, mx.array] | None:
    """`softmax_weights` of attention scores in one native pass, or None.

    MLX's x86 CPU build runs the row maximum, the compiled exponential and the sum as
    scalar loops (~7 ns a score: 10-15 ms of a qwen05 decode step at 4K keys); the
    native pass computes the same polynomial exponential with AVX2 where the CPU has it.

    Args:
        scores: ``(..., T)`` float32 scores; masked entries hold a very negative number.

    Returns:
        ``(weights, sums)`` as `softmax_weights` returns them, or None when the kernel
        is not used, predates this entry point, or the decode block is switched off
        (`decode_block.DISABLE_ENV`).
    """
    if scores.dtype != mx.float32 or not used() or decode_block.disabled():
        return None
    if getattr(load_module(), "softmax_weights", None) is None:
        return None
    weights, sums = cast(tuple[mx.array, mx.array], _differentiable_softmax(scores))
    return weights, sums


@mx.custom_function
def _differentiable_softmax(scores: mx.array) -> tuple[mx.array, mx.array]:
    # The native primitive has no gradient of its own; training through attention in
    # a process whose engine uses the kernel (the model kit's) takes the one below.
    module = load_module()
    assert module is not None  # `softmax` checked it
    weights, sums = module.softmax_weights(scores)
    return weights, sums


@_differentiable_softmax.vjp
def _softmax_gradient(primals, cotangents, outputs):
    """The gradient of `softmax_weights`, the same function in MLX ops."""
    # One input: MLX hands the array itself, not a one-element tuple.
    scores = primals[0] if isinstance(primals, tuple | list) else primals
    _, gradients = mx.vjp(softmax_weights, [scores], list(cotangents))
    return gradients[0]
