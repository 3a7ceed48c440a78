"""Bytes of KV cache per token and at a given context length, exactly as mlx-lm allocates.

The figures are exact, not estimates: the tests compare them with ``nbytes`` of real
mlx-lm caches. Three facts of mlx-lm 0.32 shape the arithmetic:

* An unquantized cache stores keys and values in the cache's float dtype: the
  activation dtype on Metal (usually bf16/fp16), 16 bits on the CPU backend, where the
  engine computes in float32 but narrows what it caches (`engine.cache.kv_storage`).
  The functions here call that width ``act_dtype_bytes``; recurrent state, which is
  not narrowed, may be counted at its own width (``state_dtype_bytes``).
* A quantized cache (``QuantizedKVCache``, MLX affine quantization) stores per element
  ``bits / 8`` bytes of packed data plus one scale and one bias per ``group`` elements,
  both in the cache's float dtype: ``bits / 8 + 2 * act_bytes / group`` bytes.
* Caches grow in steps of 256 tokens and ``nbytes`` counts the whole allocation, so the
  bytes at ``n`` tokens are those of ``n`` rounded up to a multiple of 256. (Appending a
  chunk to a cache whose length is not a multiple of 256 can over-allocate by up to
  one more step; the budget's safety factor absorbs that.)

Sliding-window layers hold at most their window, and are counted unquantized whatever
the bits, because mlx-lm cannot quantize a ``RotatingKVCache`` (``to_quantized`` raises
``NotImplementedError``) and the engine keeps them at the activation dtype. During the
prefill of a chunk of ``S`` tokens a sliding layer briefly holds up to
``window - 1 + S`` tokens until the next token trims it. Constant state layers (linear
attention, SSM) cost the same at any length once used.

Bounded layers (sliding and state) cannot always drop their newest tokens, so the engine
keeps up to `STATE_CHECKPOINTS` copies of them at message boundaries for turn reuse and
trims (`app.core.engine.cache.cache_checkpoints`). Those copies are part of the fixed bytes
the budget sets aside (`fixed_kv_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterable

from app.core.budget.layers import LayerCache, LayerKind
from app.core.budget.model_geometry import ModelGeometry

ALLOCATION_STEP = 256
"""Tokens by which mlx-lm's KVCache, QuantizedKVCache and RotatingKVCache grow."""
UNQUANTIZED_BITS = 16
"""``bits`` meaning "not quantized": stored in the activation dtype, whatever its width."""
VALID_KV_BITS = (16, 8, 4)
VALID_GROUP_SIZES = (32, 64, 128)
VALID_ACT_DTYPE_BYTES = (2, 4)
STATE_CHECKPOINTS = 3
"""Checkpoints of the bounded layers a conversation keeps: the system prompt's, and the
ends of the last prompt and the last reply (where the next turn resumes)."""


def round_up_to_step(tokens: int) -> int:
    """``tokens`` rounded up to a whole number of 256-token allocation steps."""
    return -(-tokens // ALLOCATION_STEP) * ALLOCATION_STEP


def validate_kv_quantization(
    bits: int, group: int, head_dims: Iterable[int] = ()
) -> None:
    """Check a KV quantization choice.

    Args:
        bits: 16 (unquantized), 8 or 4.
        group: Elements per scale/bias group: 32, 64 or 128 (ignored at 16 bits).
        head_dims: Head sizes of the layers to be quantized; ``group`` must divide each,
            since MLX quantizes along the last axis in whole groups.

    Raises:
        ValueError: Naming the invalid value and the valid ones.
    """
    if bits not in VALID_KV_BITS:
        raise ValueError(
            f"KV bits must be one of {_listing(VALID_KV_BITS)}, not {bits!r}."
        )
    if bits == UNQUANTIZED_BITS:
        return
    if group not in VALID_GROUP_SIZES:
        raise ValueError(
            f"KV group size must be one of {_listing(VALID_GROUP_SIZES)}, not {group!r}."
        )
    dims = sorted(set(head_dims))
    bad = [d for d in dims if d % group]
    if bad:
        valid = [g for g in VALID_GROUP_SIZES if all(d % g == 0 for d in dims)]
        raise ValueError(
            f"KV group size {group} does not divide head_dim {bad[0]}; valid group "
            f"sizes for this model: {_listing(valid) if valid else 'none'}."
        )


def bytes_per_element(bits: int, group: int, act_dtype_bytes: int) -> float:
    """Bytes one cached key or value element takes.

    Args:
        bits: 16 (unquantized), 8 or 4.
        group: Quantization group size (ignored at 16 bits).
        act_dtype_bytes: Bytes per element of the activation dtype (2 or 4).

    Returns:
        ``act_dtype_bytes`` unquantized, else ``bits / 8 + 2 * act_dtype_bytes / group``
        (e.g. 1.0625 at 8 bits, group 64, fp16).

    Raises:
        ValueError: An invalid bits, group or dtype width.
    """
    _check_act_bytes(act_dtype_bytes)
    validate_kv_quantization(bits, group)
    if bits == UNQUANTIZED_BITS:
        return float(act_dtype_bytes)
    return bits / 8 + 2 * act_dtype_bytes / group


def bytes_per_token(
    geometry: ModelGeometry,
    bits: int = UNQUANTIZED_BITS,
    group: int = 64,
    act_dtype_bytes: int | None = None,
) -> int:
    """Bytes added per token by the layers whose cache grows with the context.

    Only full-attention layers count: sliding-window and constant-state layers stop
    growing (see `fixed_kv_bytes`).

    Args:
        geometry: The model.
        bits: 16 (unquantized), 8 or 4.
        group: Quantization group size (ignored at 16 bits).
        act_dtype_bytes: Activation dtype width at run time; defaults to the dtype in
            config.json. The engine passes 4 on the CPU backend, where it upcasts.

    Returns:
        Bytes per token, exact.

    Raises:
        ValueError: Invalid bits/group, or a group that does not divide the head size.
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    full = [layer for layer in geometry.layers if layer.kind is LayerKind.FULL]
    validate_kv_quantization(bits, group, _head_dims(full))
    return sum(layer_bytes_per_token(layer, bits, group, act) for layer in full)


def kv_bytes_at(
    geometry: ModelGeometry,
    context_tokens: int,
    bits: int = UNQUANTIZED_BITS,
    group: int = 64,
    allocation_rounding: bool = True,
    *,
    act_dtype_bytes: int | None = None,
    state_dtype_bytes: int | None = None,
) -> int:
    """Total cache bytes of the whole model holding ``context_tokens`` tokens.

    Args:
        geometry: The model.
        context_tokens: Tokens in the cache (prompt plus generated).
        bits: 16 (unquantized), 8 or 4; applies to full-attention layers.
        group: Quantization group size (ignored at 16 bits).
        allocation_rounding: Round the length up to mlx-lm's 256-token allocation step,
            which is what the cache really holds in memory.
        act_dtype_bytes: Width of the cache's floats at run time (2 on the CPU
            backend); defaults to config.json's dtype.
        state_dtype_bytes: Width of recurrent state (the activation dtype: 4 on the
            CPU backend); defaults to ``act_dtype_bytes``.

    Returns:
        Bytes, with sliding windows capped at their window and recurrent state included.

    Raises:
        ValueError: A negative length, invalid bits/group, or a group that does not
            divide the head size.
    """
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int):
        raise ValueError(f"context_tokens must be an integer, not {context_tokens!r}.")
    if context_tokens < 0:
        raise ValueError(f"context_tokens must be >= 0, not {context_tokens}.")
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    full = [layer for layer in geometry.layers if layer.kind is LayerKind.FULL]
    validate_kv_quantization(bits, group, _head_dims(full))
    if context_tokens == 0:
        return 0  # mlx-lm allocates nothing before the first token
    tokens = round_up_to_step(context_tokens) if allocation_rounding else context_tokens
    total = 0
    for layer in geometry.layers:
        if layer.kind is LayerKind.FULL:
            total += tokens * layer_bytes_per_token(layer, bits, group, act)
        elif layer.kind is LayerKind.SLIDING:
            kept = min(tokens, layer.window or 0)
            total += kept * layer_bytes_per_token(layer, UNQUANTIZED_BITS, group, act)
        else:
            total += layer.state_bytes(state_dtype_bytes or act)
    return total


def bounded_kv_bytes(
    geometry: ModelGeometry,
    act_dtype_bytes: int | None = None,
    state_dtype_bytes: int | None = None,
) -> int:
    """The most the non-growing layers hold live: full sliding windows plus all state.

    Args:
        geometry: The model.
        act_dtype_bytes: Width of the cache's floats; defaults to config.json's.
        state_dtype_bytes: Width of recurrent state; defaults to ``act_dtype_bytes``.
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    total = 0
    for layer in geometry.layers:
        if layer.kind is LayerKind.SLIDING:
            per_token = layer_bytes_per_token(layer, UNQUANTIZED_BITS, 64, act)
            total += (layer.window or 0) * per_token
        elif layer.kind is LayerKind.STATE:
            total += layer.state_bytes(state_dtype_bytes or act)
    return total


def checkpoint_bytes(
    geometry: ModelGeometry,
    act_dtype_bytes: int | None = None,
    state_dtype_bytes: int | None = None,
) -> int:
    """Bytes of one state checkpoint: a copy of every bounded layer at its largest."""
    return bounded_kv_bytes(geometry, act_dtype_bytes, state_dtype_bytes)


def fixed_kv_bytes(
    geometry: ModelGeometry,
    act_dtype_bytes: int | None = None,
    state_dtype_bytes: int | None = None,
) -> int:
    """What the memory budget sets aside before dividing the rest by `bytes_per_token`.

    The bounded layers at their largest, plus `STATE_CHECKPOINTS` checkpoints of them
    (0 for a model whose every layer is full attention).

    Args:
        geometry: The model.
        act_dtype_bytes: Width of the cache's floats; defaults to config.json's.
        state_dtype_bytes: Width of recurrent state; defaults to ``act_dtype_bytes``.
    """
    live = bounded_kv_bytes(geometry, act_dtype_bytes, state_dtype_bytes)
    return live + STATE_CHECKPOINTS * checkpoint_bytes(
        geometry, act_dtype_bytes, state_dtype_bytes
    )


def prefill_scores_bytes(
    geometry: ModelGeometry,
    chunk_tokens: int,
    context_tokens: int,
    act_dtype_bytes: int | None = None,
) -> int:
    """Transient bytes of one layer's attention scores while prefilling a chunk.

    On the CPU backend MLX's attention materializes the full score matrix of a prefill
    chunk (query heads x chunk x keys) one layer at a time (measured: peak memory rises
    by that much). It is not part of the cache but can exceed it: for Llama-3.1-8B a
    2048-token chunk needs as much as the whole float32 cache at the same length. The
    engine should size its prefill chunk so this stays small next to the budget.

    Args:
        geometry: The model.
        chunk_tokens: Tokens prefilled in one forward pass.
        context_tokens: Tokens in the cache once the chunk is in (the keys attended to).
        act_dtype_bytes: Activation dtype width at run time; defaults to config.json's.

    Returns:
        Bytes, an upper bound for models with sliding layers.
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    return geometry.num_attention_heads * chunk_tokens * context_tokens * act


def layer_bytes_per_token(layer: LayerCache, bits: int, group: int, act: int) -> int:
    """Bytes one attention layer stores per token at a precision (0 for a state)."""
    if bits == UNQUANTIZED_BITS:
        return layer.kv_elements_per_token * act
    # Integer arithmetic: the group (>= 32) divides each head size, so the packed
    # uint32 words (dim * bits / 32 of them, 4 bytes each) and the groups are whole.
    per_head = sum(
        dim * bits // 8 + 2 * act * (dim // group)
        for dim in (layer.k_head_dim, layer.v_head_dim)
    )
    return layer.kv_heads * per_head


def _head_dims(layers: Iterable[LayerCache]) -> list[int]:
    return [d for layer in layers for d in (layer.k_head_dim, layer.v_head_dim)]


def resolve_act_bytes(geometry: ModelGeometry, act_dtype_bytes: int | None) -> int:
    """The activation dtype width to count with: the runtime's, else config.json's."""
    act = geometry.act_dtype_bytes if act_dtype_bytes is None else act_dtype_bytes
    _check_act_bytes(act)
    return act


def _check_act_bytes(act: int) -> None:
    if act not in VALID_ACT_DTYPE_BYTES:
        raise ValueError(
            f"act_dtype_bytes must be one of {_listing(VALID_ACT_DTYPE_BYTES)}, "
            f"not {act!r}."
        )


def _listing(values: Iterable[int]) -> str:
    return ", ".join(str(v) for v in values)
