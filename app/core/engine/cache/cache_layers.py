"""The kinds of cache entry a model has, and what Swapless may do with each.

mlx-lm gives every layer one cache entry, and for the models people run now they are of
three kinds (`app.core.budget.layers.LayerKind`):

* full attention (``KVCache``; ``QuantizedKVCache`` once quantized): keys and values of
  every token. The only kind that grows, so the only one worth quantizing; trimming the
  newest entries is exact.
* sliding window (``RotatingKVCache``): the last ``max_size`` tokens in a ring buffer.
  mlx-lm cannot quantize it (``to_quantized`` raises). Dropping the newest entries is
  exact only while nothing has been evicted yet (``offset < max_size``, mlx-lm's own
  ``is_trimmable``): once the window has slid, the oldest tokens the rewound window
  would need again are gone, so a rewind restores a checkpoint instead.
* constant state (``ArraysCache``: Gated DeltaNet, Mamba-2, short convolutions): a
  fixed-size state that cannot be rewound at all, only restored from a checkpoint.

This module classifies entries, quantizes the growing ones at the requested precision
(uniform, or aged: `aged_cache.AgedKVCache`, whose tiers lower the precision of old
tokens block by block), and copies the bounded ones for checkpoints, all through the
classes' public state.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_lm.models.cache import (
    ArraysCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    _BaseCache,
)

from app.core.budget.layers import LayerKind
from app.core.engine.cache.aged_cache import AgedKVCache
from app.core.engine.cache.shifted_cache import ShiftedKVCache, ShiftedQuantizedKVCache
from app.core.engine.cpu.quantized_products import dequantized
from app.core.engine.events import LayerGroup
from app.core.presets.generation_settings import KVSettings

OTHER = "other"
"""Kind of a cache entry Swapless does not know (left alone: never quantized)."""


class DenseViewQuantizedKVCache(_BaseCache):
    """A quantized KV cache that hands attention dense keys and values.

    mlx-lm's quantized attention cannot serve two kinds of layer: gpt-oss's full layers
    (attention sinks: "Quantized SDPA does not support attention sinks") and the Gemma 4
    layers whose keys and values later KV-shared layers reuse (those layers have no
    cache, so they would get quantized tuples as plain arrays). This cache stores the
    entries exactly as a ``QuantizedKVCache`` does (same bytes, same state) but returns
    them dequantized to the activation dtype, so attention takes MLX's fused path. It
    has no ``bits`` attribute on purpose: that is what mlx-lm's attention dispatches on.

    Args:
        group_size: Quantization group size.
        bits: 8 or 4.
    """

    def __init__(self, group_size: int = 64, bits: int = 8):
        self.store = QuantizedKVCache(group_size=group_size, bits=bits)

    @classmethod
    def wrapping(cls, store: QuantizedKVCache) -> DenseViewQuantizedKVCache:
        """A dense view of an existing quantized cache (shares its arrays)."""
        view = cls.__new__(cls)
        view.store = store
        return view

    @property
    def quant_bits(self) -> int:
        """Bits per stored element."""
        return int(self.store.bits)

    @property
    def quant_group_size(self) -> int:
        """Elements per scale/bias group."""
        return int(self.store.group_size)

    @property
    def offset(self) -> int:
        return self.store.offset

    @offset.setter
    def offset(self, value: int) -> None:
        self.store.offset = value

    @property
    def keys(self):
        return self.store.keys

    @property
    def values(self):
        return self.store.values

    def update_and_fetch(self, keys, values):
        dtype = keys.dtype
        q_keys, q_values = self.store.update_and_fetch(keys, values)
        group, bits = self.quant_group_size, self.quant_bits
        return (
            dequantized(q_keys, group, bits).astype(dtype),
            dequantized(q_values, group, bits).astype(dtype),
        )

    @property
    def state(self):
        return self.store.state

    @state.setter
    def state(self, v):
        self.store = QuantizedKVCache.from_state(v)

    def size(self):
        return self.store.offset

    def is_trimmable(self):
        return True

    def trim(self, n):
        return self.store.trim(n)

    def make_mask(self, *args, **kwargs):
        return self.store.make_mask(*args, **kwargs)

    def empty(self):
        return self.store.empty()

    @property
    def nbytes(self):
        return self.store.nbytes


GROWING_TYPES = (
    KVCache,
    QuantizedKVCache,
    ShiftedKVCache,
    ShiftedQuantizedKVCache,
    DenseViewQuantizedKVCache,
    AgedKVCache,
)


def layer_kind(layer) -> str:
    """``full_attention``, ``sliding_attention``, ``constant_state`` or ``other``."""
    if isinstance(layer, GROWING_TYPES):
        return LayerKind.FULL.value
    if isinstance(layer, RotatingKVCache):
        return LayerKind.SLIDING.value
    if isinstance(layer, ArraysCache):
        return LayerKind.STATE.value
    return OTHER


def is_bounded(layer) -> bool:
    """True for entries that cannot always drop their newest tokens (sliding, state)."""
    return isinstance(layer, RotatingKVCache | ArraysCache)


def quantized_bits(layer) -> tuple[int, int] | None:
    """(bits, group size) of a quantized entry, or None.

    For an aged entry: the key bits of its oldest tier holding tokens (None while every
    token is still exact).
    """
    if isinstance(layer, AgedKVCache):
        bits = layer.lowest_key_bits
        return (bits, layer.group_size) if bits != 16 else None
    if isinstance(layer, DenseViewQuantizedKVCache):
        return layer.quant_bits, layer.quant_group_size
    if isinstance(layer, QuantizedKVCache):
        return int(layer.bits), int(layer.group_size)
    return None


def can_drop_newest(layer, n: int) -> bool:
    """True when removing the newest ``n`` tokens from ``layer`` is exact."""
    if n <= 0:
        return True
    if isinstance(layer, GROWING_TYPES):
        return True
    if isinstance(layer, RotatingKVCache):
        # Nothing evicted yet: the buffer is the whole history in order.
        return int(layer.offset) < int(layer.max_size)
    return False


def quantize_growing_layers(
    layers: list, kv: KVSettings, dense_view: Iterable[int] = ()
) -> None:
    """Quantize, in place, the full-attention entries that reached the start length.

    Sliding-window and state entries stay at the activation dtype (mlx-lm cannot
    quantize a ``RotatingKVCache``, and a constant state gains nothing from it). With
    ``kv.aging`` the full-attention entries become `AgedKVCache`s (whatever their
    length) and every aged entry moves the blocks that passed a tier's size down.

    Args:
        layers: The cache entries (replaced in place, as mlx-lm does).
        kv: The requested precision; nothing happens at 16 bits.
        dense_view: Indices whose entry must hand attention dense arrays
            (`DenseViewQuantizedKVCache`).
    """
    if not kv.quantized:
        return
    dense_view = set(dense_view)
    if kv.aging is not None:
        for index, layer in enumerate(layers):
            if isinstance(layer, KVCache | ShiftedKVCache):
                layers[index] = layer = AgedKVCache.from_dense(
                    layer, kv.aging, kv.group_size, index in dense_view
                )
            if isinstance(layer, AgedKVCache):
                layer.age()
        return
    for index, layer in enumerate(layers):
        if not isinstance(layer, KVCache | ShiftedKVCache):
            continue
        if layer.offset < kv.quantized_kv_start:
            continue
        quantized = layer.to_quantized(group_size=kv.group_size, bits=kv.bits)
        if index in dense_view:
            layers[index] = DenseViewQuantizedKVCache.wrapping(quantized)
        else:
            layers[index] = quantized


def dense_view_indices(model: nn.Module, layers: list) -> frozenset[int]:
    """Full-attention entries whose quantized form must be a `DenseViewQuantizedKVCache`.

    Two cases, both where mlx-lm's quantized attention would fail: layers whose attention
    has sinks (gpt-oss), and layers whose keys and values KV-shared layers reuse
    (Gemma 4's ``previous_kvs``).
    """
    model_layers = list(getattr(model, "layers", None) or [])
    indices = set()
    for index, layer in enumerate(model_layers[: len(layers)]):
        attention = getattr(layer, "self_attn", None)
        if attention is not None and hasattr(attention, "sinks"):
            indices.add(index)
    sources = _find_attribute(model, "previous_kvs")
    if sources:
        owned = len(layers)
        indices.update(source for source in sources[owned:] if source < owned)
    return frozenset(i for i in indices if isinstance(layers[i], GROWING_TYPES))


def full_attention_head_dims(model: nn.Module, layers: list) -> list[int]:
    """Head sizes of the full-attention entries (the ones that get quantized)."""
    model_layers = list(getattr(model, "layers", None) or [])
    dims = []
    for index, layer in enumerate(layers):
        if not isinstance(layer, GROWING_TYPES) or index >= len(model_layers):
            continue
        attention = getattr(model_layers[index], "self_attn", None)
        head_dim = getattr(attention, "head_dim", None)
        if head_dim:
            dims.append(int(head_dim))
    return dims


def _find_attribute(model: nn.Module, name: str):
    """``name`` on the model or the inner text model (VLM wrappers nest it)."""
    for path in ("", "model", "language_model", "language_model.model"):
        target: object | None = model
        for part in filter(None, path.split(".")):
            target = getattr(target, part, None)
        value = getattr(target, name, None) if target is not None else None
        if value is not None:
            return value
    return None


def sliced_copy(layer, length: int):
    """A fresh plain ``KVCache`` / ``QuantizedKVCache`` with the first ``length`` tokens.

    The result uses mlx-lm's own class names (a `DenseViewQuantizedKVCache` becomes its
    ``QuantizedKVCache``), so ``save_prompt_cache`` / ``load_prompt_cache`` round-trip
    it; `adapted` re-wraps it for a model that needs the dense view.
    """
    if isinstance(layer, AgedKVCache):
        return layer.first(length)
    if isinstance(layer, DenseViewQuantizedKVCache):
        layer = layer.store
    keys, values = (tree_copy(x, length) for x in (layer.keys, layer.values))
    twin: QuantizedKVCache | KVCache
    if isinstance(layer, QuantizedKVCache):
        twin = QuantizedKVCache(group_size=layer.group_size, bits=layer.bits)
    else:
        twin = KVCache()
    twin.keys, twin.values, twin.offset = keys, values, length
    return twin


def tree_copy(x, length: int):
    """Independent copies of the first ``length`` tokens of keys or values.

    A deep copy, not ``mx.array(view)``: a view would keep the whole 256-step buffer
    alive (measured: a 10-token slice of a 25.6 MB buffer held all of it).
    """
    if isinstance(x, tuple | list):
        return type(x)(copy.deepcopy(part[..., :length, :]) for part in x)
    return copy.deepcopy(x[..., :length, :])


def adapted(layer, dense_view: bool):
    """``layer`` in the form the model needs at its index (dense view or plain)."""
    if isinstance(layer, AgedKVCache):
        layer.dense_fetch = dense_view
        return layer
    if dense_view and type(layer) is QuantizedKVCache:
        return DenseViewQuantizedKVCache.wrapping(layer)
    if not dense_view and isinstance(layer, DenseViewQuantizedKVCache):
        return layer.store
    return layer


# -- checkpoints of bounded entries ------------------------------------------------


def snapshot(layer) -> tuple:
    """An independent copy of a bounded entry's state (no data copied yet).

    ``mx.array(x)`` is a new array object over the same buffer: the live cache's later
    writes (``RotatingKVCache`` assigns into its buffer) rebind the live object only,
    and MLX copies the buffer then instead of writing into the one still referenced
    here. A snapshot therefore costs its bytes once the live entry moves on.
    """
    if isinstance(layer, RotatingKVCache):
        keys, values, offset, keep, max_size, idx = layer.state
        if keys is not None and idx == keys.shape[2] > max_size:
            # Right after a prefill chunk the buffer holds window - 1 + chunk tokens
            # in order, until the next token trims it; only the newest max_size (and
            # the first `keep`) are ever read again, so keep just those: the state
            # mlx-lm's own next decode step would leave.
            keys, values = (_window(x, keep, max_size) for x in (keys, values))
            idx = max_size
        return ("rotating", _copy(keys), _copy(values), offset, keep, max_size, idx)
    if isinstance(layer, ArraysCache):
        arrays, left_padding, lengths = layer.state
        return ("arrays", [_copy(a) for a in arrays], left_padding, lengths)
    raise TypeError(f"no checkpoint for a {type(layer).__name__}")


def restore(saved: tuple):
    """A fresh, independent cache entry holding a `snapshot`."""
    if saved[0] == "rotating":
        _, keys, values, offset, keep, max_size, idx = saved
        layer = RotatingKVCache(max_size=max_size, keep=keep)
        layer.state = (_copy(keys), _copy(values), offset, keep, max_size, idx)
        return layer
    _, arrays, left_padding, lengths = saved
    arrays_layer = ArraysCache(len(arrays))
    arrays_layer.state = ([_copy(a) for a in arrays], left_padding, lengths)
    return arrays_layer


def snapshot_nbytes(saved: tuple) -> int:
    """Bytes a snapshot keeps alive."""
    if saved[0] == "rotating":
        return sum(a.nbytes for a in saved[1:3] if a is not None)
    return sum(a.nbytes for a in saved[1] if a is not None)


def _copy(array):
    return None if array is None else mx.array(array)


def _window(x, keep: int, max_size: int):
    """The first ``keep`` and the newest ``max_size - keep`` entries, copied."""
    parts = [x[..., :keep, :]] if keep else []
    parts.append(x[..., x.shape[2] - (max_size - keep) :, :])
    return mx.contiguous(mx.concatenate(parts, axis=2))


# -- reporting -----------------------------------------------------------------------


def layer_groups(layers: list) -> tuple[LayerGroup, ...]:
    """Group the entries by kind and precision, in order of first appearance."""
    groups: dict[tuple, list] = defaultdict(list)
    tiers: dict[tuple, list] = defaultdict(list)
    for layer in layers:
        if isinstance(layer, AgedKVCache):
            for tier, tokens, nbytes in layer.tier_report():
                tiers[
                    (tier.name, tier.key_bits, tier.value_bits, layer.group_size)
                ].append((tokens, nbytes, layer))
            continue
        kind = layer_kind(layer)
        quantized = quantized_bits(layer)
        bits, group = quantized if quantized else (16, None)
        groups[(kind, bits, group, _dtype(layer))].append(layer)
    result = []
    for (kind, bits, group, dtype), members in groups.items():
        held: int | None = None
        if kind != LayerKind.STATE.value:
            held = max(_tokens_held(layer) for layer in members)
        result.append(
            LayerGroup(
                kind=kind,
                count=len(members),
                bits=bits,
                group_size=group,
                dtype=dtype,
                nbytes=sum(0 if layer.empty() else layer.nbytes for layer in members),
                tokens=held,
            )
        )
    for (name, key_bits, value_bits, group), members in tiers.items():
        result.append(
            LayerGroup(
                kind=LayerKind.FULL.value,
                count=len(members),
                bits=key_bits,
                group_size=group if key_bits != 16 else None,
                dtype=_dtype(members[0][2]),
                nbytes=sum(nbytes for _, nbytes, _ in members),
                tokens=max(tokens for tokens, _, _ in members),
                value_bits=value_bits,
                tier=name,
            )
        )
    return tuple(result)


def _tokens_held(layer) -> int:
    if isinstance(layer, RotatingKVCache):
        return min(int(layer.offset), int(layer.max_size))
    offset = int(getattr(layer, "offset", 0) or 0)
    return offset - int(getattr(layer, "gap", 0))


def _dtype(layer) -> str:
    if layer.empty():
        return ""
    if isinstance(layer, AgedKVCache):
        return "" if layer.dtype is None else str(layer.dtype).removeprefix("mlx.core.")
    arrays: list[mx.array] = []
    if isinstance(layer, ArraysCache):
        entries: list[Any] = layer.cache  # mlx-lm's type is its initial [None, ...]
        arrays = [a for a in entries if a is not None]
    else:
        keys = getattr(layer, "keys", None)
        if isinstance(keys, tuple | list):
            arrays = [keys[-1]]  # quantized: (packed, scales, biases)
        elif keys is not None:
            arrays = [keys]
    names = sorted({str(a.dtype).removeprefix("mlx.core.") for a in arrays})
    return "+".join(names)
