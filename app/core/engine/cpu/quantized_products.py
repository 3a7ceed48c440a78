"""Scores and weighted values of one decode query against quantized keys and values.

A decode step on the CPU backend reads every cached key once and every cached value
once, so these two products are its cost. MLX's CPU quantized matmul is scalar code;
here the packed words are split with a ``uint8`` view into bytes (8 bits), nibbles (4)
or bit pairs (2), cast to float32 and multiplied through BLAS, and the per-group scales
and biases are applied to the small products, since within a group
``q . (s * k + b) = s * (q . k) + b * sum(q)``. Other widths (3, 5, 6 bits straddle
bytes) go through ``mx.quantized_matmul``. Keys and values may have different widths
(an aged cache keeps keys at more bits than values).

`KVPart` is one stretch of a cache as attention reads it: dense, or quantized at its
own bits, with keys possibly stored after a fixed rotation (`hadamard`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx

from app.core.engine.cpu import kv_kernel

# Bit widths whose packed words split into whole bytes, nibbles or bit pairs.
UNPACKABLE_BITS = (8, 4, 2)
DENSE = 16
"""``bits`` of a part stored at the activation dtype."""


@dataclass(frozen=True)
class KVPart:
    """A stretch of cached keys and values as attention reads it.

    Attributes:
        keys: ``(B, H_kv, T, D)`` dense, or ``mx.quantize``'s (weights, scales, biases).
        values: The same for the values.
        key_bits: 16 for dense keys, else their bits.
        value_bits: 16 for dense values, else their bits.
        group_size: Quantization group (ignored when dense).
        rotation: When set, the keys are stored as ``k @ rotation`` (an orthogonal
            matrix); scores then need ``q @ rotation``.
    """

    keys: mx.array | tuple | list
    values: mx.array | tuple | list
    key_bits: int = DENSE
    value_bits: int = DENSE
    group_size: int = 64
    rotation: mx.array | None = None

    @property
    def length(self) -> int:
        """Tokens in this part."""
        return int(packed(self.keys).shape[2])

    def dense_keys(self, dtype) -> mx.array:
        """The keys in the model's own basis, at ``dtype``."""
        if self.key_bits != DENSE:
            keys = widened(self.keys, self.group_size, self.key_bits)
        else:
            keys = dense(self.keys)
        # Widened first: a 16-bit product would be MLX's slow non-BLAS matmul on CPU.
        keys = keys.astype(dtype)
        if self.rotation is not None:
            keys = keys @ self.rotation.T.astype(dtype)
        return keys

    def dense_values(self, dtype) -> mx.array:
        """The values at ``dtype``."""
        if self.value_bits != DENSE:
            return widened(self.values, self.group_size, self.value_bits).astype(dtype)
        return dense(self.values).astype(dtype)


class TieredKV:
    """The parts of a tiered cache, oldest first, handed to attention as keys and values.

    An aged cache returns one of these for both keys and values; the CPU attention
    reads each part at its own precision, any other attention takes `dense`.

    Args:
        parts: Non-empty parts, oldest tokens first (the newest part ends with the
            tokens of the current step, as a causal mask expects).
    """

    def __init__(self, parts: list[KVPart]):
        if not parts:
            raise ValueError("a tiered cache hands attention at least one part")
        self.parts = tuple(parts)

    @property
    def length(self) -> int:
        """Tokens in all parts."""
        return sum(part.length for part in self.parts)

    def dense(self, dtype) -> tuple[mx.array, mx.array]:
        """Keys and values of every part, dequantized and concatenated."""
        keys = [part.dense_keys(dtype) for part in self.parts]
        values = [part.dense_values(dtype) for part in self.parts]
        if len(keys) == 1:
            return keys[0], values[0]
        return mx.concatenate(keys, axis=2), mx.concatenate(values, axis=2)


def packed(x) -> mx.array:
    """The array whose shape tells the tokens: ``x`` itself, or a quantized triple's
    packed weights (``mx.quantize`` returns a list)."""
    return x[0] if isinstance(x, tuple | list) else x


def dense(x: mx.array | tuple | list) -> mx.array:
    """A dense part's keys or values: one array."""
    assert isinstance(x, mx.array), "a part stored at the activation dtype is one array"
    return x


def triple(x: mx.array | tuple | list) -> tuple[mx.array, mx.array, mx.array]:
    """A quantized part's (packed weights, scales, biases), as ``mx.quantize`` made."""
    weights, scales, biases = x
    return weights, scales, biases


def dequantized(x: mx.array | tuple | list, group_size: int, bits: int) -> mx.array:
    """``mx.dequantize`` of a quantized (weights, scales, biases) triple."""
    weights, scales, biases = triple(x)
    return mx.dequantize(weights, scales, biases, group_size=group_size, bits=bits)


def widened(x: mx.array | tuple | list, group_size: int, bits: int) -> mx.array:
    """A quantized cache part for a prefill's attention: widened to float32 by the
    native kernel where it is used (~50x faster than MLX's CPU code), else
    `dequantized`."""
    wide = kv_kernel.dequantize(triple(x), bits, group_size)
    return dequantized(x, group_size, bits) if wide is None else wide


@lru_cache(maxsize=8)
def hadamard(dim: int) -> mx.array:
    """The ``dim x dim`` Sylvester-Hadamard matrix scaled to be orthogonal (float32).

    Symmetric, so it is its own inverse. Rotating keys by it spreads an outlier channel
    over every channel of a head, which lowers the quantization error of the keys.

    Raises:
        ValueError: ``dim`` is not a power of two.
    """
    if dim < 1 or dim & (dim - 1):
        raise ValueError(
            f"a Hadamard rotation needs a power-of-two head size, not {dim}"
        )
    matrix = mx.array([[1.0]])
    while matrix.shape[0] < dim:
        matrix = mx.concatenate(
            [
                mx.concatenate([matrix, matrix], axis=1),
                mx.concatenate([matrix, -matrix], axis=1),
            ],
            axis=0,
        )
    return matrix / math.sqrt(dim)


def _integer_planes(packed: mx.array, groups: int, bits: int) -> list[mx.array]:
    """The integers of ``mx.quantize``'s packed words as float32 matrices, per group.

    ``packed`` is ``(B, H, T, D * bits / 32)`` uint32, little-endian (element i of a
    word sits at bits ``i * bits``). At 8 bits one plane ``(B, H, G, T, D / G)`` holds
    every element; at 4 (2) bits the nibbles (bit pairs) at each place of a byte are one
    plane each: the elements at positions 0, 1 (, 2, 3) modulo 2 (4) of a group. Each
    plane is contiguous per group, so BLAS reads it in place.
    """
    as_bytes = mx.view(packed, mx.uint8)
    if bits == 8:
        planes = [as_bytes]
    else:
        mask = (1 << bits) - 1
        planes = [
            mx.bitwise_and(mx.right_shift(as_bytes, shift) if shift else as_bytes, mask)
            for shift in range(0, 8, bits)
        ]
    batch, heads, tokens, width = as_bytes.shape
    return [
        plane.reshape(batch, heads, tokens, groups, width // groups)
        .transpose(0, 1, 3, 2, 4)
        .astype(mx.float32)
        for plane in planes
    ]


def quantized_scores(
    folded: mx.array, q_keys: tuple, bits: int, group_size: int
) -> mx.array:
    """``folded @ keys^T`` for quantized keys.

    Args:
        folded: ``(B, H_kv, R, D)`` float32 query rows (a GQA group's heads, scaled).
        q_keys: ``mx.quantize`` output of ``(B, H_kv, T, D)`` keys.
        bits: Bits of the keys.
        group_size: Their quantization group.

    Returns:
        ``(B, H_kv, R, T)`` scores.
    """
    if bits not in UNPACKABLE_BITS:
        weights, scales, biases = q_keys
        return mx.quantized_matmul(
            folded,
            weights,
            scales,
            biases,
            transpose=True,
            group_size=group_size,
            bits=bits,
        )
    batch, kv_heads, _, groups = q_keys[1].shape
    rows, dim = folded.shape[2], folded.shape[3]
    by_group = folded.reshape(batch, kv_heads, rows, groups, dim // groups)
    by_group = by_group.transpose(0, 1, 3, 2, 4)  # (B, H_kv, G, R, g)
    key_planes = _integer_planes(q_keys[0], groups, bits)
    step = len(key_planes)
    raw = sum(
        by_group[..., index::step] @ plane.swapaxes(-1, -2)
        for index, plane in enumerate(key_planes)
    )  # (B, H_kv, G, R, T)
    key_scales = q_keys[1].transpose(0, 1, 3, 2)[:, :, :, None, :]
    key_biases = q_keys[2].transpose(0, 1, 3, 2)[:, :, :, None, :]
    query_sums = by_group.sum(axis=-1, keepdims=True)
    return (raw * key_scales + query_sums * key_biases).sum(axis=2)


def quantized_values(
    weights: mx.array, q_values: tuple, bits: int, group_size: int
) -> mx.array:
    """``weights @ values`` for quantized values.

    Args:
        weights: ``(B, H_kv, R, T)`` float32 attention weights (not normalized).
        q_values: ``mx.quantize`` output of ``(B, H_kv, T, D_v)`` values.
        bits: Bits of the values.
        group_size: Their quantization group.

    Returns:
        ``(B, H_kv, R, D_v)``.
    """
    if bits not in UNPACKABLE_BITS:
        packed_values, scales, biases = q_values
        return mx.quantized_matmul(
            weights,
            packed_values,
            scales,
            biases,
            transpose=False,
            group_size=group_size,
            bits=bits,
        )
    batch, kv_heads, rows, _ = weights.shape
    value_scales = q_values[1].transpose(0, 1, 3, 2)[:, :, :, None, :]
    value_biases = q_values[2].transpose(0, 1, 3, 2)[..., None]  # (B, H_kv, G, T, 1)
    scaled = weights[:, :, None] * value_scales  # (B, H_kv, G, R, T)
    value_groups = q_values[1].shape[-1]
    planes = [
        scaled @ plane for plane in _integer_planes(q_values[0], value_groups, bits)
    ]
    # Interleave the planes back into element order (a small (R, D) array).
    out = mx.stack(planes, axis=-1).reshape(*planes[0].shape[:-1], -1)
    out = out + weights[:, :, None] @ value_biases
    return out.transpose(0, 1, 3, 2, 4).reshape(batch, kv_heads, rows, -1)


def part_scores(folded: mx.array, part: KVPart) -> mx.array:
    """Scores of decode query rows against one part (rotated to its basis).

    The native kernel reads the part as stored when it is built (`kv_kernel`); else
    16-bit keys are widened and quantized ones go through `quantized_scores`.
    """
    if part.rotation is not None:
        folded = folded @ part.rotation.astype(folded.dtype)
    fast = kv_kernel.scores(folded, part.keys, part.key_bits, part.group_size)
    if fast is not None:
        return fast
    if part.key_bits == DENSE:
        return folded @ dense(part.keys).astype(folded.dtype).swapaxes(-1, -2)
    return quantized_scores(folded, triple(part.keys), part.key_bits, part.group_size)


def part_values(weights: mx.array, part: KVPart) -> mx.array:
    """Weighted values of one part, for that part's slice of the weights."""
    fast = kv_kernel.values(weights, part.values, part.value_bits, part.group_size)
    if fast is not None:
        return fast
    if part.value_bits == DENSE:
        return weights @ dense(part.values).astype(weights.dtype)
    return quantized_values(
        weights, triple(part.values), part.value_bits, part.group_size
    )
