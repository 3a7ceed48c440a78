"""KV caches whose rotary position runs ahead of the number of entries they store.

mlx-lm's caches use ``offset`` both as the count of stored entries and as the rotary
position of the next token. Dropping old entries from the middle (a splice) breaks that
identity: the keys already stored carry their rotary positions, so later tokens must keep
counting from where they were. These subclasses keep ``offset`` as the position the model
reads, and store ``gap`` = positions that have no stored entry; the storage index is
``offset - gap``. As with mlx-lm's ``RotatingKVCache`` (whose ``offset`` also exceeds its
stored length), the attention relative distances of every kept entry stay exact.
"""

from __future__ import annotations

from mlx_lm.models.cache import KVCache, QuantizedKVCache, create_attention_mask


class _StoredIndexMixin:
    """Runs the parent's storage logic with ``offset`` temporarily at the stored length."""

    gap: int = 0
    offset: int  # the parent cache's

    @property
    def stored(self) -> int:
        """Entries held in storage."""
        return self.offset - self.gap

    _in_storage_view: bool = False

    def _storage_view(self, method, *args):
        # Parent methods call each other (update_and_fetch -> keys_and_values): shift once.
        if self._in_storage_view:
            return method(*args)
        self._in_storage_view = True
        self.offset -= self.gap
        try:
            return method(*args)
        finally:
            self.offset += self.gap
            self._in_storage_view = False

    # super() is the cache class the mixin precedes (KVCache or QuantizedKVCache),
    # which mypy cannot see from the mixin alone.
    def update_and_fetch(self, keys, values):
        method = super().update_and_fetch  # type: ignore[misc]
        return self._storage_view(method, keys, values)

    def keys_and_values(self):
        return self._storage_view(super().keys_and_values)  # type: ignore[misc]

    def size(self):
        return self.stored

    def trim(self, n):
        # The newest entries are contiguous in position, so stored and position shrink
        # together.
        n = min(self.stored, n)
        self.offset -= n
        return n

    def make_mask(self, N, return_array=False, window_size=None):
        return create_attention_mask(
            N, offset=self.stored, return_array=return_array, window_size=window_size
        )


class ShiftedKVCache(_StoredIndexMixin, KVCache):
    """An unquantized KV cache with a rotary position ahead of its stored length."""

    def __init__(self, gap: int = 0):
        super().__init__()
        self.gap = gap

    @property
    def state(self):
        return self.keys, self.values, self.offset

    @state.setter
    def state(self, v):
        self.keys, self.values, self.offset = v

    def to_quantized(
        self, group_size: int = 64, bits: int = 4
    ) -> ShiftedQuantizedKVCache:
        plain = KVCache()
        plain.keys, plain.values, plain.offset = self.keys, self.values, self.offset
        quantized = plain.to_quantized(group_size=group_size, bits=bits)
        twin = ShiftedQuantizedKVCache(group_size=group_size, bits=bits, gap=self.gap)
        twin.keys, twin.values, twin.offset = (
            quantized.keys,
            quantized.values,
            self.offset,
        )
        return twin


class ShiftedQuantizedKVCache(_StoredIndexMixin, QuantizedKVCache):
    """A quantized KV cache with a rotary position ahead of its stored length."""

    def __init__(self, group_size: int = 64, bits: int = 8, gap: int = 0):
        super().__init__(group_size=group_size, bits=bits)
        self.gap = gap


def shifted(layer, gap: int):
    """Return a shifted cache holding the same arrays as ``layer`` (no copy).

    Args:
        layer: A `KVCache`, `QuantizedKVCache` or shifted cache.
        gap: The new gap between position and stored length.
    """
    twin: ShiftedQuantizedKVCache | ShiftedKVCache
    if isinstance(layer, QuantizedKVCache):
        twin = ShiftedQuantizedKVCache(
            group_size=layer.group_size, bits=layer.bits, gap=gap
        )
    elif isinstance(layer, KVCache):
        twin = ShiftedKVCache(gap=gap)
    else:
        raise TypeError(f"cannot shift a {type(layer).__name__}")
    twin.keys, twin.values = layer.keys, layer.values
    return twin


def stored_length(layer) -> int:
    """Entries a cache layer stores (its ``offset`` unless it is shifted)."""
    return int(layer.offset) - int(getattr(layer, "gap", 0))


def spliceable(layers) -> bool:
    """True when every layer is a plain, quantized or aged KV cache (shifted or not)."""
    from app.core.engine.cache.aged_cache import AgedKVCache

    spliceable_types = (*_SPLICEABLE, AgedKVCache)
    return bool(layers) and all(type(layer) in spliceable_types for layer in layers)


_SPLICEABLE = (KVCache, QuantizedKVCache, ShiftedKVCache, ShiftedQuantizedKVCache)
