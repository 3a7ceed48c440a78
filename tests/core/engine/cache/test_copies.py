"""Hand-written copies of caches forget no field and share no mutable state.

`ConversationCache.clone`, `Checkpoints.copy` and `AgedKVCache`'s deep copy build their
twins field by field for speed (or because MLX dtypes cannot be deep-copied). Each
twin is compared with its original attribute by attribute: the same names, plain
values equal, and every mutable value (lists, arrays, nested stores) a different object
with the same content. A field added to ``__init__`` later that the copy shares or
drops fails here until the copy knows it.
"""

from __future__ import annotations

import copy
import dataclasses
import enum

import mlx.core as mx
import pytest

from app.core.engine.cache.aged_cache import AgedKVCache
from app.core.engine.cache.cache_checkpoints import Checkpoint, Checkpoints
from app.core.engine.cache.conversation_cache import ConversationCache
from app.core.engine.generation import prefill_only
from app.core.engine.loader import load_model_folder
from app.core.presets.generation_settings import KVAging, KVSettings

AGING = KVAging(
    recent_tokens=64,
    band_tokens=64,
    band_key_bits=8,
    band_value_bits=8,
    floor_key_bits=4,
    floor_value_bits=4,
    block_tokens=64,
)


def _immutable(value) -> bool:
    if value is None or isinstance(value, bool | int | float | str | bytes | enum.Enum):
        return True
    if isinstance(value, mx.Dtype):
        return True
    if isinstance(value, frozenset):
        return all(_immutable(v) for v in value)
    if isinstance(value, tuple) and not isinstance(value, mx.array):
        return all(_immutable(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.__dataclass_params__.frozen
    return False


def _same_content(a, b) -> bool:
    if isinstance(a, mx.array):
        return a.shape == b.shape and a.dtype == b.dtype and bool(mx.all(a == b))
    if isinstance(a, list | tuple):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(_same_content(x, y) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_content(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") and not _immutable(a):
        return type(a) is type(b) and _same_content(vars(a), vars(b))
    return a == b


def assert_independent_twin(original, twin, shared: frozenset[str] = frozenset()):
    """Fail unless ``twin`` has every field of ``original``, equal, and owns its state.

    Args:
        original: The copied object.
        twin: Its copy.
        shared: Fields shared on purpose (e.g. the model, which is read-only).
    """
    assert type(twin) is type(original)
    assert sorted(vars(twin)) == sorted(vars(original)), "the copy lost or added fields"
    for name, value in vars(original).items():
        theirs = getattr(twin, name)
        if name in shared:
            assert theirs is value, f"{name} should be shared"
        elif _immutable(value):
            assert theirs == value, f"{name}: {theirs!r} != {value!r}"
        else:
            assert theirs is not value, (
                f"{name} ({type(value).__name__}) is shared by the copy; copy it"
            )
            assert _same_content(value, theirs), f"{name} differs in the copy"


@pytest.fixture(scope="module")
def loaded(tiny_model_dir):
    return load_model_folder(tiny_model_dir)


def _filled(loaded, kv: KVSettings, tokens: int) -> ConversationCache:
    cache = ConversationCache(loaded.model, kv)
    ids = [(7 * i + 3) % 200 + 10 for i in range(tokens)]
    prefill_only(loaded, cache, ids, kv)
    mx.eval([layer.state for layer in cache.layers])
    return cache


def test_a_clone_carries_every_field_and_owns_its_state(loaded):
    cache = _filled(loaded, KVSettings(bits=16), 40)
    # Every field away from its __init__ value, so a field the copy resets shows.
    cache.prefill_step = 37
    cache.last_rewind = "trim"
    cache.checkpoints.take(cache.offset, cache.layers)
    assert cache.token_ids and cache.positions and len(cache.checkpoints) == 1

    twin = cache.clone()

    assert_independent_twin(cache, twin, shared=frozenset({"model"}))
    assert_independent_twin(cache.checkpoints, twin.checkpoints)
    for mine, theirs in zip(cache.layers, twin.layers, strict=True):
        assert_independent_twin(mine, theirs)


def test_a_clone_goes_on_alone(loaded):
    cache = _filled(loaded, KVSettings(bits=16), 40)
    before = (list(cache.token_ids), cache.offset, cache.layers[0].keys.shape)
    twin = cache.clone()
    more = [11, 12, 13]
    prefill_only(loaded, twin, twin.token_ids + more, twin.kv)
    assert twin.offset == 43 and twin.token_ids[-3:] == more
    assert (list(cache.token_ids), cache.offset) == before[:2]
    assert cache.layers[0].keys.shape == before[2]


def test_a_checkpoints_copy_carries_every_field():
    checkpoints = Checkpoints(limit=3)
    checkpoints._items = [Checkpoint(5, {0: ("x",)}, 10), Checkpoint(9, {}, 0)]
    twin = checkpoints.copy()
    assert_independent_twin(checkpoints, twin)
    for mine, theirs in zip(checkpoints._items, twin._items, strict=True):
        assert_independent_twin(mine, theirs)
    twin.clear()
    assert checkpoints.positions == [5, 9]


def test_an_aged_cache_deep_copy_carries_every_field(loaded):
    cache = _filled(loaded, KVSettings.aged(AGING), 200)
    layer = next(x for x in cache.layers if isinstance(x, AgedKVCache))
    # Tokens in every tier, a gap and dense fetch: nothing at its __init__ value.
    assert all(store.count for store in layer.tiers)
    layer.gap, layer.offset, layer.dense_fetch = 3, layer.offset + 3, True

    twin = copy.deepcopy(layer)

    assert_independent_twin(layer, twin)
    for mine, theirs in zip(layer.tiers, twin.tiers, strict=True):
        assert_independent_twin(mine, theirs)


def test_an_aged_twin_keeps_every_setting_and_starts_empty(loaded):
    cache = _filled(loaded, KVSettings.aged(AGING), 200)
    layer = next(x for x in cache.layers if isinstance(x, AgedKVCache))
    layer.dense_fetch = True
    twin = layer.twin(layer.gap)
    # Only the held entries may differ: a setting added later must be passed on.
    held = {"tiers", "offset"}
    assert sorted(vars(twin)) == sorted(vars(layer))
    for name, value in vars(layer).items():
        if name not in held:
            assert getattr(twin, name) == value, name
    assert twin.stored == 0 and all(store.count == 0 for store in twin.tiers)


def test_a_dense_view_wrapper_has_the_fields_init_sets():
    from mlx_lm.models.cache import QuantizedKVCache

    from app.core.engine.cache.cache_layers import DenseViewQuantizedKVCache

    store = QuantizedKVCache(group_size=64, bits=8)
    wrapped = DenseViewQuantizedKVCache.wrapping(store)
    built = DenseViewQuantizedKVCache(group_size=64, bits=8)
    assert sorted(vars(wrapped)) == sorted(vars(built))
    assert wrapped.store is store
