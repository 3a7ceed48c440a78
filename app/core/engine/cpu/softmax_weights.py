"""Softmax weights in MLX operations the CPU backend can vectorize.

MLX's x86 CPU build has no SIMD types, so ``mx.exp`` runs the Cephes polynomial one
element at a time through ``std::fma`` library calls (~16 ns an element): the softmax
was most of a long prefill. Here the exponential of the (shifted, so non-positive)
scores is one polynomial plus five squarings in plain multiplies and adds, which
``mx.compile`` fuses into vectorized loops. The native kernel's softmax pass
(`kv_kernel.softmax`) computes the same polynomial and uses this function's gradient.
"""

from __future__ import annotations

import mlx.core as mx

# Scores this far below their row's maximum get weight e^-30 ~ 1e-13 instead of their
# true, smaller weight: invisible next to a row sum >= 1 in float32, even over 128K keys.
SCORE_FLOOR = -30.0
# exp(x) = exp(x / 32) ** 32: five squarings bring the argument into [-0.94, 0].
_SQUARINGS = 5
_SHRINK = 1.0 / 2**_SQUARINGS
# e^y on [-30/32, 0], least-squares fit of the relative error (max 4.6e-10), low order
# first. With the squarings the weights are within 8e-6 relative of float64 e^x (mx.exp:
# 2e-6), far inside the float path's rounding and the quantized cache's own error.
_EXP_COEFFICIENTS = (
    0.999999999539124,
    0.9999999433506804,
    0.4999988243148713,
    0.16665717430266133,
    0.04162835786161558,
    0.008247832877330613,
    0.0012805174650401359,
    0.00012331352810273377,
)


def _shrunk_exponential(scores: mx.array, row_max: mx.array) -> mx.array:
    """e^((scores - row_max) / 32), with arguments below `SCORE_FLOOR` raised to it."""
    shifted = (scores - row_max) * _SHRINK - SCORE_FLOOR * _SHRINK
    # relu by arithmetic: MLX's maximum/where are not vectorized by the JIT compiler.
    y = 0.5 * (shifted + mx.abs(shifted)) + SCORE_FLOOR * _SHRINK
    c = _EXP_COEFFICIENTS
    y2 = y * y
    low = (c[0] + c[1] * y) + y2 * (c[2] + c[3] * y)
    high = (c[4] + c[5] * y) + y2 * (c[6] + c[7] * y)
    return low + (y2 * y2) * high


def _power_of_32(values: mx.array) -> mx.array:
    for _ in range(_SQUARINGS):
        values = values * values
    return values


# Two compiled kernels: MLX splits longer fused chains itself, at worse places.
_shrunk_exponential_kernel = mx.compile(_shrunk_exponential, shapeless=True)
_power_of_32_kernel = mx.compile(_power_of_32, shapeless=True)


def softmax_weights(scores: mx.array) -> tuple[mx.array, mx.array]:
    """Return unnormalized softmax weights of the last axis and their row sums.

    Args:
        scores: Float32 scores; masked entries hold a very negative number.

    Returns:
        ``(weights, sums)``: ``weights / sums`` is the softmax of ``scores``.
    """
    row_max = mx.max(scores, axis=-1, keepdims=True)
    weights = _power_of_32_kernel(_shrunk_exponential_kernel(scores, row_max))
    return weights, mx.sum(weights, axis=-1, keepdims=True)
