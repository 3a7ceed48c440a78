"""Attention for MLX's CPU backend: a cheaper exponential and GQA heads folded into rows.

mlx-lm computes attention with ``mx.fast.scaled_dot_product_attention`` (which on CPU is
composed of plain ops) or, for a quantized cache, with
``quantized_scaled_dot_product_attention``. On this backend both are far from the
machine's limits (shared/NOTES-mlx.md, measured with mlx 0.32.4):

- MLX's x86 CPU build has no SIMD types, so ``mx.exp`` runs the Cephes polynomial one
  element at a time through ``std::fma`` library calls: ~16 ns per element, and the
  softmax is most of a long prefill. Here it is one native pass where the kernel is
  built (`kv_kernel.softmax`), else `softmax_weights`' polynomial in MLX ops.
- The quantized path broadcasts the quantized keys and values over the query heads of a
  GQA group and runs MLX's CPU quantized matmuls, which are scalar code: for a prefill
  3-4x slower than the float path, and ``q @ K^T`` over 8K quantized keys took 8-17 ms
  per layer against 0.9 ms for the whole float attention. Here multi-token queries
  dequantize the cache once and take the dense path. A decode query reads the cache as
  stored through the native KV products when they are built (`kv_kernel`), else works
  on the integers through BLAS (`quantized_products`; measured per layer at 8K keys:
  float 0.91 ms, 8-bit 1.05 ms, 4-bit 1.14 ms).
- The dense cache is stored in 16 bits (`cache.kv_storage`): a prefill widens it once
  per call, a decode query reads it like a quantized part (kernel or widening).
- An aged cache (`aged_cache`) hands attention its tiers as a `TieredKV`: parts at the
  activation dtype and at their own key and value bits. A decode query scores every
  part at its precision and takes one softmax over all scores; a prefill dequantizes
  the parts once, as for a uniform quantized cache.

`install` routes mlx-lm's attention through `scaled_dot_product_attention` here; the
backend decision (`backend.adapt_model`) calls it on the CPU backend only, so Metal keeps
mlx-lm's fused kernels untouched.
"""

from __future__ import annotations

import sys

import mlx.core as mx

from app.core.engine.cpu import kv_kernel
from app.core.engine.cpu.quantized_products import (
    KVPart,
    TieredKV,
    packed,
    part_scores,
    part_values,
)
from app.core.engine.cpu.softmax_weights import softmax_weights

# The causal/boolean masks put this in masked scores before the row maximum is taken.
_MASKED = -1e30
# Scores of one block of queries (all heads): 8 MiB of float32.
SCORE_BLOCK_ELEMENTS = 2**21
# Smaller blocks cost more in per-operation overhead than they save in cache misses.
MIN_QUERY_BLOCK = 32


def _fold_heads(queries: mx.array, kv_heads: int) -> mx.array:
    """(B, H, L, D) queries to (B, kv_heads, H / kv_heads * L, D): a group's rows."""
    batch, heads, length, dim = queries.shape
    return queries.reshape(batch, kv_heads, heads // kv_heads * length, dim)


def _unfold_heads(out: mx.array, heads: int) -> mx.array:
    """The inverse of `_fold_heads`: ``(B, H, L, D)`` again."""
    return out.reshape(out.shape[0], heads, -1, out.shape[-1])


def _masked_scores(
    scores: mx.array, mask, heads: int, length: int, keys: int
) -> mx.array:
    """Apply an mlx-lm attention mask to folded ``(B, kv_heads, rows, T)`` scores."""
    if mask is None:
        return scores
    batch, kv_heads, rows, _ = scores.shape
    if isinstance(mask, str):
        if mask != "causal":
            raise ValueError(f"unsupported attention mask {mask!r}")
        # Folded row r is query r % L, which sits at position keys - L + r % L.
        query_positions = keys - length + mx.arange(rows) % length
        allowed = query_positions[:, None] >= mx.arange(keys)[None]
        return mx.where(allowed, scores, _MASKED)
    if mask.ndim <= 2:
        mask = mx.tile(mx.broadcast_to(mask, (length, keys)), (rows // length, 1))
    else:
        full = mx.broadcast_to(mask, (batch, heads, length, keys))
        mask = full.reshape(batch, kv_heads, rows, keys)
    if mask.dtype == mx.bool_:
        return mx.where(mask, scores, _MASKED)
    return scores + mask.astype(scores.dtype)


def attention(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask
) -> mx.array:
    """Scaled dot-product attention over float32 keys and values.

    Long query blocks are split so each block's scores stay near `SCORE_BLOCK_ELEMENTS`:
    they then stay in the CPU caches between the passes over them, and a causal block
    skips the keys after its last query.

    Args:
        queries: ``(B, H, L, D)``.
        keys: ``(B, H_kv, T, D)``; ``H`` is a multiple of ``H_kv``.
        values: ``(B, H_kv, T, D_v)``.
        scale: Multiplies the scores.
        mask: None, ``"causal"`` (query i sees keys up to ``T - L + i``), or an array
            broadcastable to ``(B, H, L, T)``: boolean (True = attend) or additive.

    Returns:
        ``(B, H, L, D_v)``, the same as ``mx.fast.scaled_dot_product_attention``.
    """
    heads, length = queries.shape[1], queries.shape[2]
    key_count = keys.shape[2]
    # A cache stored in 16 bits (`kv_storage`) is widened once here, not per block.
    keys, values = keys.astype(queries.dtype), values.astype(queries.dtype)
    block = _query_block(heads, length, key_count)
    if block >= length or not (mask is None or isinstance(mask, str)):
        return _attention_block(queries, keys, values, scale, mask)
    outputs = []
    for start in range(0, length, block):
        stop = min(start + block, length)
        # With a causal mask these queries see nothing past the last one's position.
        visible = key_count - length + stop if mask is not None else key_count
        output = _attention_block(
            queries[:, :, start:stop],
            keys[:, :, :visible],
            values[:, :, :visible],
            scale,
            mask,
        )
        # One block's scores at a time: left lazy, MLX would hold every block's at once
        # and the prefill's peak memory would pass what the budget plans for.
        mx.eval(output)
        outputs.append(output)
    return mx.concatenate(outputs, axis=2)


def _query_block(heads: int, length: int, key_count: int) -> int:
    """Queries per block: a power of two, at least `MIN_QUERY_BLOCK`, at most L."""
    block = MIN_QUERY_BLOCK
    while block < length and 2 * block * heads * key_count <= SCORE_BLOCK_ELEMENTS:
        block *= 2
    return min(block, length)


def _attention_block(
    queries: mx.array, keys: mx.array, values: mx.array, scale: float, mask
) -> mx.array:
    heads, length = queries.shape[1], queries.shape[2]
    kv_heads, key_count = keys.shape[1], keys.shape[2]
    folded = _fold_heads(queries * scale, kv_heads)
    scores = folded @ keys.swapaxes(-1, -2)
    scores = _masked_scores(scores, mask, heads, length, key_count)
    # One native pass where the kernel is used (MLX's exponential is scalar on x86).
    weights, sums = kv_kernel.softmax(scores) or softmax_weights(scores)
    # Normalizing the (rows, D) output costs less than normalizing (rows, T) weights.
    return _unfold_heads((weights @ values) / sums, heads)


def quantized_attention(
    queries: mx.array,
    q_keys: tuple[mx.array, mx.array, mx.array],
    q_values: tuple[mx.array, mx.array, mx.array],
    scale: float,
    mask,
    group_size: int = 64,
    bits: int = 8,
    value_bits: int | None = None,
) -> mx.array:
    """Attention over a quantized cache; a drop-in for mlx-lm's quantized attention.

    Args:
        queries: ``(B, H, L, D)``.
        q_keys: ``mx.quantize`` output (weights, scales, biases) of ``(B, H_kv, T, D)``.
        q_values: The same for the values.
        scale: Multiplies the scores.
        mask: As for `attention`.
        group_size: Quantization group of the cache.
        bits: Bits per element of the keys (and of the values, by default).
        value_bits: Bits of the values when they differ from the keys'.

    Returns:
        ``(B, H, L, D)``.
    """
    part = KVPart(
        q_keys,
        q_values,
        key_bits=bits,
        value_bits=bits if value_bits is None else value_bits,
        group_size=group_size,
    )
    return tiered_attention(queries, TieredKV([part]), scale, mask)


def tiered_attention(queries: mx.array, tiered: TieredKV, scale: float, mask):
    """Attention over a cache held in parts of different precisions (`TieredKV`).

    A prefill (several queries) dequantizes every part once and takes the dense path:
    its ``L x T`` scores dwarf that. A decode query scores each part at its own
    precision (integers through BLAS for quantized parts), takes one softmax over all
    of them, and sums each part's weighted values, so no dequantized copy of the cache
    is ever made.

    Args:
        queries: ``(B, H, L, D)`` float32.
        tiered: The parts, oldest first.
        scale: Multiplies the scores.
        mask: As for `attention`.

    Returns:
        ``(B, H, L, D_v)``.
    """
    if queries.shape[2] > 1:
        keys, values = tiered.dense(queries.dtype)
        return attention(queries, keys, values, scale, mask)
    heads = queries.shape[1]
    kv_heads = packed(tiered.parts[0].keys).shape[1]
    folded = _fold_heads(queries * scale, kv_heads)
    by_part = [part_scores(folded, part) for part in tiered.parts]
    scores = by_part[0] if len(by_part) == 1 else mx.concatenate(by_part, axis=-1)
    scores = _masked_scores(scores, mask, heads, 1, scores.shape[-1])
    # (B, H_kv, R, T): one native pass where the KV kernel is used, else MLX ops.
    weights, sums = kv_kernel.softmax(scores) or softmax_weights(scores)
    out: mx.array | None = None
    start = 0
    for part in tiered.parts:
        stop = start + part.length
        share = weights if len(tiered.parts) == 1 else weights[..., start:stop]
        product = part_values(share, part)
        out = product if out is None else out + product
        start = stop
    assert out is not None, "a tiered cache has at least one part"
    return _unfold_heads(out / sums, heads)


def _handles(queries: mx.array, sinks) -> bool:
    return sinks is None and queries.dtype == mx.float32


def scaled_dot_product_attention(
    queries, keys, values, cache, scale: float, mask, sinks=None
) -> mx.array:
    """mlx-lm's ``scaled_dot_product_attention`` with the CPU paths of this module.

    Attention sinks and non-float32 activations keep mlx-lm's own implementation
    (an aged cache's parts are then dequantized for it). An aged cache's `TieredKV`
    goes to `tiered_attention`.
    """
    if not _handles(queries, sinks):
        if isinstance(keys, TieredKV):
            keys, values = keys.dense(queries.dtype)
        elif isinstance(keys, mx.array) and keys.dtype != queries.dtype:
            keys, values = keys.astype(queries.dtype), values.astype(queries.dtype)
        return _MLX_LM_SDPA(
            queries, keys, values, cache, scale=scale, mask=mask, sinks=sinks
        )
    if isinstance(keys, TieredKV):
        return tiered_attention(queries, keys, scale, mask)
    if hasattr(cache, "bits"):
        return quantized_attention(
            queries,
            keys,
            values,
            scale,
            mask,
            group_size=cache.group_size,
            bits=cache.bits,
        )
    if queries.shape[2] == 1 and keys.dtype != queries.dtype:
        # A decode step over a 16-bit cache: read as stored (the native kernel widens
        # in registers) rather than widening the whole cache in memory every token.
        return tiered_attention(queries, TieredKV([KVPart(keys, values)]), scale, mask)
    return attention(queries, keys, values, scale, mask)


def _mlx_lm_base():
    from mlx_lm.models import base

    return base


_MLX_LM_SDPA = _mlx_lm_base().scaled_dot_product_attention
MLX_LM_QUANTIZED_SDPA = _mlx_lm_base().quantized_scaled_dot_product_attention
"""mlx-lm's own quantized attention, kept for comparisons (tests, benchmarks)."""


def install() -> int:
    """Route mlx-lm's attention through this module (idempotent).

    mlx-lm's model modules import ``scaled_dot_product_attention`` from
    ``mlx_lm.models.base`` by name, so the name is replaced there and in every model
    module already imported; modules imported later take the replaced one from base.

    Returns:
        How many modules now use this module's attention.
    """
    base = _mlx_lm_base()
    base.scaled_dot_product_attention = scaled_dot_product_attention
    routed = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("mlx_lm.models.") or module is None:
            continue
        current = getattr(module, "scaled_dot_product_attention", None)
        if current is _MLX_LM_SDPA or current is scaled_dot_product_attention:
            vars(module)["scaled_dot_product_attention"] = scaled_dot_product_attention
            routed += 1
    return routed


def uninstall() -> None:
    """Give every mlx-lm module its own attention back (tests compare both)."""
    for name, module in list(sys.modules.items()):
        if not name.startswith("mlx_lm.models.") or module is None:
            continue
        if getattr(module, "scaled_dot_product_attention", None) is (
            scaled_dot_product_attention
        ):
            vars(module)["scaled_dot_product_attention"] = _MLX_LM_SDPA


def installed() -> bool:
    """True when mlx-lm's base module routes attention through this module."""
    return _mlx_lm_base().scaled_dot_product_attention is scaled_dot_product_attention
