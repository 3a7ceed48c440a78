"""A full-attention KV cache whose precision falls with age: recent exact, older 8-bit, oldest 4-bit.

Quantization error hurts the newest tokens most (they get most of the attention) and
keys more than values (KIVI; mlx-lm#1550), so a cache that keeps the newest tokens at
the activation dtype, a band of older ones at 8 bits (or K8/V4) and the oldest at a
floor may hold more context per byte than one uniform precision. `AgedKVCache` is one
layer's cache entry, a drop-in for mlx-lm's ``KVCache`` (``update_and_fetch``,
``offset``, ``trim``, ``make_mask``, ``state``, ``nbytes``):

* The tiers are `app.core.budget.aged_budget.tiers`: new tokens arrive in the first
  one; once a tier holds a whole block more than its size, its oldest whole blocks are
  quantized (or requantized) into the next tier in one operation, never the whole cache
  per token. Buffers grow in steps of one block and a tier that passed tokens on keeps
  room for its size plus one block, so the bytes are exactly what the budget computes.
* Entries stay in position order across the tiers (oldest tier first) and precision
  never rises with position: a splice that puts fresh entries before older-tier ones
  lowers them to the tier that follows (`joined`), so "by age" stays true and trims
  drop the newest positions.
* As in `shifted_cache`, ``offset`` is the rotary position of the next token and
  ``gap`` counts positions with no stored entry, so splices keep exact positions.
* With ``rotate_keys`` the quantized tiers hold ``k @ H`` for a fixed Hadamard matrix
  ``H`` (attention rotates the queries the same way), spreading outlier channels before
  they are quantized.

Attention: while `cpu_attention` is installed (the CPU backend) ``update_and_fetch``
returns a `TieredKV` that the CPU attention reads part by part at each part's precision.
Otherwise (Metal, or a layer whose keys other code reuses: ``dense_fetch``) it returns
dense keys and values, every part dequantized and concatenated, for mlx-lm's attention.
"""

from __future__ import annotations

import copy
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import _BaseCache, create_attention_mask

from app.core.budget.aged_budget import Tier, tiers
from app.core.engine.cache import kv_storage
from app.core.engine.cpu import cpu_attention
from app.core.engine.cpu.quantized_products import (
    DENSE,
    KVPart,
    TieredKV,
    dequantized,
    hadamard,
    packed,
)
from app.core.presets.generation_settings import KVAging


def _round_up(tokens: int, step: int) -> int:
    return -(-tokens // step) * step


def _as_parts(x) -> list:
    return list(x) if isinstance(x, tuple | list) else [x]


def _map(x, function):
    if isinstance(x, tuple | list):
        return tuple(function(part) for part in x)
    return function(x)


def _slice(x, start: int, stop: int):
    return _map(x, lambda part: part[..., start:stop, :])


def _copy(x, start: int, stop: int, capacity: int):
    """Entries ``[start, stop)`` of a buffer, in a fresh buffer of ``capacity``."""

    def one(part):
        kept = part[..., start:stop, :]
        spare = capacity - (stop - start)
        if spare > 0:
            shape = (*part.shape[:2], spare, part.shape[3])
            kept = mx.concatenate([kept, mx.zeros(shape, part.dtype)], axis=2)
        return mx.contiguous(kept)

    return _map(x, one)


def _write(buffer, data, start: int):
    stop = start + int(packed(data).shape[2])
    if isinstance(buffer, tuple | list):
        for part, new in zip(buffer, data, strict=True):
            part[..., start:stop, :] = new
        return buffer
    buffer[..., start:stop, :] = data
    return buffer


class _TierStore:
    """The entries of one tier, oldest first, in buffers with room for more.

    Args:
        tier: Which tier (its size and bits).
        group_size: Quantization group of a quantized tier.
        rotate_keys: Quantized keys are stored rotated.
    """

    def __init__(self, tier: Tier, group_size: int, rotate_keys: bool):
        self.tier = tier
        self.group_size = group_size
        self.rotated = rotate_keys and tier.quantized
        self.keys = None
        self.values = None
        self.count = 0

    def __deepcopy__(self, memo) -> _TierStore:
        # Every field carried over; the arrays copied (their buffers are shared).
        twin = _TierStore.__new__(_TierStore)
        twin.__dict__.update(self.__dict__)
        twin.keys = copy.deepcopy(self.keys, memo)
        twin.values = copy.deepcopy(self.values, memo)
        return twin

    @property
    def capacity(self) -> int:
        """Entries the buffers have room for."""
        return 0 if self.keys is None else int(packed(self.keys).shape[2])

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers."""
        if self.keys is None:
            return 0
        return sum(p.nbytes for p in [*_as_parts(self.keys), *_as_parts(self.values)])

    def encode(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        """Dense keys (already in this tier's basis) and values as this tier stores them."""
        # Stored in 16 bits on the CPU backend (`kv_storage`): the dense tier's entries,
        # a quantized tier's scales and biases.
        like = None if self.keys is None else _as_parts(self.keys)[-1].dtype
        keys, values = (
            kv_storage.narrowed(keys, like),
            kv_storage.narrowed(values, like),
        )
        if not self.tier.quantized:
            return keys, values
        group = self.group_size
        return (
            tuple(mx.quantize(keys, group_size=group, bits=self.tier.key_bits)),
            tuple(mx.quantize(values, group_size=group, bits=self.tier.value_bits)),
        )

    def decode(self, keys, values, dtype) -> tuple[mx.array, mx.array]:
        """Stored entries back to dense arrays (keys stay in this tier's basis)."""
        if not self.tier.quantized:
            return keys, values
        group = self.group_size
        return (
            dequantized(keys, group, self.tier.key_bits).astype(dtype),
            dequantized(values, group, self.tier.value_bits).astype(dtype),
        )

    def append(self, keys, values, block: int, tight: bool = False) -> None:
        """Add stored entries after the newest.

        Args:
            keys: Keys as this tier stores them (`encode`).
            values: Values as this tier stores them.
            block: Buffers grow by whole blocks.
            tight: Grow to exactly what is held (a loaded or copied cache).
        """
        added = int(packed(keys).shape[2])
        if not added:
            return
        needed = self.count + added
        if needed > self.capacity:
            capacity = needed if tight else _round_up(needed, block)
            if self.keys is None:
                self.keys = _copy(keys, 0, added, capacity)
                self.values = _copy(values, 0, added, capacity)
                self.count = needed
                return
            self.keys = _copy(self.keys, 0, self.count, capacity)
            self.values = _copy(self.values, 0, self.count, capacity)
        self.keys = _write(self.keys, keys, self.count)
        self.values = _write(self.values, values, self.count)
        self.count = needed

    def drop_front(self, count: int, capacity: int) -> None:
        """Forget the oldest ``count`` entries; keep room for ``capacity``."""
        self.keys = _copy(self.keys, count, self.count, capacity)
        self.values = _copy(self.values, count, self.count, capacity)
        self.count -= count

    def fit(self, capacity: int) -> None:
        """Keep room for at most ``capacity`` entries (never fewer than are held)."""
        if self.keys is None or self.capacity <= capacity:
            return
        if self.count == 0:
            self.keys = self.values = None
            return
        self.keys = _copy(self.keys, 0, self.count, capacity)
        self.values = _copy(self.values, 0, self.count, capacity)

    def held(self, start: int = 0, stop: int | None = None):
        """(keys, values) of held entries ``[start, stop)``, as stored."""
        stop = self.count if stop is None else stop
        return _slice(self.keys, start, stop), _slice(self.values, start, stop)

    def part(self, rotation) -> KVPart:
        """The entries held, for attention."""
        keys, values = self.held()
        return KVPart(
            keys,
            values,
            key_bits=self.tier.key_bits,
            value_bits=self.tier.value_bits,
            group_size=self.group_size,
            rotation=rotation if self.rotated else None,
        )


class AgedKVCache(_BaseCache):
    """One full-attention layer's cache with precision tiers by age.

    Args:
        aging: The tiers.
        group_size: Quantization group of the quantized tiers.
        gap: Positions with no stored entry (after a splice).
        dense_fetch: Always hand attention dense arrays (layers whose keys other code
            reuses, e.g. KV-shared layers, or attention with sinks).
    """

    def __init__(
        self,
        aging: KVAging,
        group_size: int = 64,
        gap: int = 0,
        dense_fetch: bool = False,
    ):
        self.aging = aging
        self.group_size = group_size
        self.tiers = [
            _TierStore(tier, group_size, aging.rotate_keys) for tier in tiers(aging)
        ]
        self.offset = gap
        self.gap = gap
        self.dense_fetch = dense_fetch
        self.dtype: mx.Dtype | None = None
        self.key_dim = 0

    @classmethod
    def from_dense(
        cls, layer, aging: KVAging, group_size: int, dense_fetch: bool = False
    ) -> AgedKVCache:
        """An aged entry holding a plain (maybe shifted) ``KVCache``'s tokens.

        They all enter the first tier; `age` then moves what passed its size down.
        """
        gap = int(getattr(layer, "gap", 0))
        aged = cls(aging, group_size, gap=gap, dense_fetch=dense_fetch)
        aged.offset = int(layer.offset)
        stored = aged.stored
        if layer.keys is not None and stored:
            keys, values = layer.keys[..., :stored, :], layer.values[..., :stored, :]
            aged.dtype = kv_storage.computed_dtype(keys.dtype)
            aged.key_dim = int(keys.shape[-1])
            aged.store_new(keys, values)
        return aged

    # -- what it holds -----------------------------------------------------------------

    @property
    def stored(self) -> int:
        """Entries held in storage (``offset - gap``)."""
        return self.offset - self.gap

    def size(self) -> int:
        return self.stored

    def empty(self) -> bool:
        return all(store.keys is None for store in self.tiers)

    @property
    def nbytes(self) -> int:
        return sum(store.nbytes for store in self.tiers)

    def tier_report(self) -> list[tuple[Tier, int, int]]:
        """(tier, entries held, bytes) per tier, newest first."""
        return [(store.tier, store.count, store.nbytes) for store in self.tiers]

    @property
    def lowest_key_bits(self) -> int:
        """Key bits of the oldest tier holding entries (16 while all are exact)."""
        held = [store.tier.key_bits for store in self.tiers if store.count]
        return min(held) if held else DENSE

    @property
    def rotation(self) -> mx.array | None:
        """The Hadamard matrix of the quantized keys, or None."""
        if not self.aging.rotate_keys or not self.key_dim:
            return None
        return hadamard(self.key_dim)

    def _key_rotation(self) -> mx.array:
        rotation = self.rotation
        assert rotation is not None, "a rotated tier is only written after a key"
        return rotation

    # -- growing -----------------------------------------------------------------------

    def update_and_fetch(self, keys: mx.array, values: mx.array):
        """Age what the last step left, store the new tokens, return what attention reads."""
        if self.dtype is None:
            self.dtype = keys.dtype
            self.key_dim = int(keys.shape[-1])
        self.age()
        self.store_new(keys, values)
        self.offset += int(keys.shape[2])
        return self.fetch()

    def store_new(self, keys: mx.array, values: mx.array) -> None:
        """Put new tokens' dense keys (model basis) and values in the first tier.

        ``offset`` is the caller's to advance.
        """
        store = self.tiers[0]
        if store.rotated:
            dtype = self.dtype or keys.dtype
            keys = keys.astype(dtype) @ self._key_rotation().astype(dtype)
        store.append(*store.encode(keys, values), self.aging.block_tokens)

    def age(self) -> int:
        """Move whole blocks down a tier wherever a tier passed its size by a block.

        Returns:
            Entries moved (counted once per tier crossed).
        """
        block = self.aging.block_tokens
        moved = 0
        for newer, older in zip(self.tiers, self.tiers[1:], strict=False):
            size = newer.tier.size
            assert size is not None, "only the floor tier is unbounded, and it is last"
            if newer.count < size + block:
                continue
            count = (newer.count - size) // block * block
            self._lower(newer, older, *newer.held(0, count))
            newer.drop_front(count, size + block)
            moved += count
        return moved

    def _lower(self, source: _TierStore, target: _TierStore, keys, values) -> None:
        """Append entries stored by ``source`` to the lower tier ``target``."""
        keys, values = source.decode(keys, values, self.dtype)
        if target.rotated and not source.rotated:
            keys = keys @ self._key_rotation().astype(keys.dtype)
        target.append(*target.encode(keys, values), self.aging.block_tokens)

    def fetch(self):
        """What attention reads: a `TieredKV`, or dense keys and values."""
        rotation = self.rotation
        parts = [store.part(rotation) for store in reversed(self.tiers) if store.count]
        if not self.dense_fetch and cpu_attention.installed():
            tiered = TieredKV(parts)
            return tiered, tiered
        if len(parts) == 1 and parts[0].key_bits == DENSE:
            return parts[0].keys, parts[0].values
        return TieredKV(parts).dense(self.dtype)

    # -- rewinding ---------------------------------------------------------------------

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        """Drop the newest ``n`` entries (position and storage shrink together)."""
        n = min(self.stored, n)
        left = n
        for store in self.tiers:
            take = min(store.count, left)
            store.count -= take
            left -= take
        self.offset -= n
        return n

    def release_spare(self) -> None:
        """Give back whole blocks a trim left unused."""
        block = self.aging.block_tokens
        for store in self.tiers:
            store.fit(_round_up(store.count, block))

    def make_mask(self, N, return_array=False, window_size=None):
        return create_attention_mask(
            N, offset=self.stored, return_array=return_array, window_size=window_size
        )

    # -- copies and splices ------------------------------------------------------------

    def pieces(self, start: int, stop: int) -> list[tuple[int, object, object]]:
        """Stored entries ``[start, stop)`` as (tier index, keys, values), oldest first."""
        result = []
        first = 0  # storage index of this tier's oldest entry
        for index in reversed(range(len(self.tiers))):
            store = self.tiers[index]
            low, high = max(start, first), min(stop, first + store.count)
            if low < high:
                result.append((index, *store.held(low - first, high - first)))
            first += store.count
        return result

    def __deepcopy__(self, memo) -> AgedKVCache:
        # MLX dtypes cannot be deep-copied, so not the whole __dict__: every field is
        # carried over (one added later cannot be forgotten), then the tiers copied.
        twin = type(self).__new__(type(self))
        twin.__dict__.update(self.__dict__)
        twin.tiers = copy.deepcopy(self.tiers, memo)
        return twin

    def twin(self, gap: int = 0) -> AgedKVCache:
        """An empty cache with the same tiers, dtype and fetch mode."""
        twin = AgedKVCache(self.aging, self.group_size, gap, self.dense_fetch)
        twin.dtype, twin.key_dim = self.dtype, self.key_dim
        return twin

    def first(self, length: int) -> AgedKVCache:
        """An independent cache holding the first ``length`` stored entries.

        The entries keep their tiers (they are not made more precise than they are);
        buffers hold exactly them. ``offset`` is set to ``length`` (no gap).
        """
        twin = self.twin()
        twin.extend(self.pieces(0, length), tight=True)
        twin.offset = length
        return twin

    def extend(self, pieces, tight: bool = False) -> None:
        """Append `pieces` (oldest first) after the newest entries.

        A piece from a more precise tier than some entry after it is lowered to that
        entry's tier, so precision never rises with position.

        Args:
            pieces: (tier index, keys, values) as `pieces` returns them (of a cache
                with the same tiers).
            tight: Buffers hold exactly the entries.
        """
        lowest = 0
        placed = []
        for index, keys, values in reversed(pieces):
            if index < lowest:
                placed.append((index, lowest, keys, values))
            else:
                lowest = index
                placed.append((index, index, keys, values))
        held = [i for i, store in enumerate(self.tiers) if store.count]
        if held and placed and max(t for _, t, _, _ in placed) > min(held):
            raise ValueError("entries appended to an aged cache must not be older-tier")
        block = self.aging.block_tokens
        for source, target, keys, values in reversed(placed):
            if source == target:
                self.tiers[target].append(keys, values, block, tight=tight)
            else:
                self._lower(self.tiers[source], self.tiers[target], keys, values)
        if tight:
            for store in self.tiers:
                store.fit(store.count)

    # -- saving ------------------------------------------------------------------------

    @property
    def state(self):
        held = {store.tier.name: store.held() for store in self.tiers if store.count}
        dtype = "" if self.dtype is None else str(self.dtype).removeprefix("mlx.core.")
        return (
            self.aging.spec,
            self.group_size,
            self.offset,
            self.gap,
            self.key_dim,
            dtype,
            held,
        )

    @state.setter
    def state(self, v):
        spec, group, offset, gap, key_dim, dtype = v[:6]
        held = v[6] if len(v) > 6 else {}
        type(self).__init__(self, KVAging.from_spec(spec), int(group))
        self.offset, self.gap, self.key_dim = int(offset), int(gap), int(key_dim)
        self.dtype = getattr(mx, dtype) if dtype else None
        block = self.aging.block_tokens
        for store in self.tiers:
            if store.tier.name in held:
                keys, values = held[store.tier.name]
                keys = tuple(keys) if store.tier.quantized else keys
                values = tuple(values) if store.tier.quantized else values
                store.append(keys, values, block, tight=True)


def joined(head: AgedKVCache, head_stop: int, tail: AgedKVCache, start: int, stop: int):
    """A fresh cache: ``head``'s first ``head_stop`` entries, then ``tail``'s
    ``[start, stop)``, with ``tail``'s offset (the gap is what positions skip).

    Head entries more precise than the tail's first ones are lowered to their tier.
    """
    result = tail.twin()
    result.extend([*head.pieces(0, head_stop), *tail.pieces(start, stop)])
    result.offset = int(tail.offset)
    result.gap = result.offset - (head_stop + stop - start)
    result.release_spare()
    return result
