"""The CPU backend's 16-bit KV cache: what it stores, what it costs, what it changes.

Real mlx-lm caches and models; the engine's own `load_model_folder` installs the
narrowing, the tests compare with mlx-lm's float32 behaviour in the same process.
"""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache

from app.core.budget import kv_bytes_at, read_geometry
from app.core.engine.cache import kv_storage
from app.core.engine.cache.shifted_cache import ShiftedKVCache
from app.core.engine.cpu import backend, cpu_attention

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="Metal keeps the model's own cache dtype"
)


def _fill(cache, tokens: int, dim: int = 64, seed: int = 0):
    keys = mx.random.normal((1, 2, tokens, dim), key=mx.random.key(seed))
    values = mx.random.normal((1, 2, tokens, dim), key=mx.random.key(seed + 1))
    return cache.update_and_fetch(keys, values)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_float32_entries_are_stored_in_16_bits_across_growth(dtype):
    with kv_storage.storing(dtype):
        shifted = ShiftedKVCache(gap=3)
        shifted.offset = 3  # three positions with no stored entry (a splice)
        for cache in (KVCache(), shifted, RotatingKVCache(max_size=300)):
            keys, values = _fill(cache, 200)
            assert keys.dtype == values.dtype == dtype
            keys, values = _fill(cache, 100, seed=5)  # grows past one 256 step
            assert keys.dtype == dtype
            assert cache.keys.dtype == cache.values.dtype == dtype
        quantized = QuantizedKVCache(group_size=64, bits=8)
        _fill(quantized, 300)
        assert quantized.keys[0].dtype == mx.uint32
        assert quantized.keys[1].dtype == quantized.keys[2].dtype == dtype


def test_bytes_halve_and_the_budget_counts_them():
    dense32, dense16 = KVCache(), KVCache()
    with kv_storage.storing(None):
        _fill(dense32, 300)
    with kv_storage.storing(mx.float16):
        _fill(dense16, 300)
        converted = dense16.to_quantized(group_size=64, bits=8)
    assert dense16.nbytes * 2 == dense32.nbytes
    # 512 tokens allocated x 2 heads x 64 x (K, V): 2 bytes each, or 1 + 2 * 2 / 64.
    assert dense16.nbytes == 512 * 2 * 64 * 2 * 2
    assert converted.nbytes == 512 * 2 * (64 + 2 * 2 * 1) * 2


def test_a_cache_keeps_the_dtype_it_already_holds():
    with kv_storage.storing(None):
        old = KVCache()
        _fill(old, 10)  # made before the engine narrowed: float32
    with kv_storage.storing(mx.bfloat16):
        bf = KVCache()
        _fill(bf, 10)
    with kv_storage.storing(mx.float16):
        _fill(old, 300)
        _fill(bf, 300)
    assert old.keys.dtype == mx.float32
    assert bf.keys.dtype == mx.bfloat16


def test_uninstall_gives_mlx_lm_its_own_behaviour():
    with kv_storage.storing(mx.float16):
        assert kv_storage.installed()
    with kv_storage.storing(None):
        cache = KVCache()
        keys, _ = _fill(cache, 5)
        assert keys.dtype == mx.float32
        assert not kv_storage.installed()
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        kv_storage.install(mx.float32)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("length", [1, 40])
def test_attention_over_a_16_bit_cache_is_within_its_rounding(dtype, length):
    # Decode (1 query) and prefill (40): read from 16 bits, computed in float32.
    cpu_attention.install()
    queries = mx.random.normal((1, 8, length, 64), key=mx.random.key(3))
    cache32, cache16 = KVCache(), KVCache()
    with kv_storage.storing(None):
        keys32, values32 = _fill(cache32, 700)
    with kv_storage.storing(dtype):
        keys16, values16 = _fill(cache16, 700)
    mask = "causal" if length > 1 else None
    exact = cpu_attention.scaled_dot_product_attention(
        queries, keys32, values32, cache32, 0.125, mask
    )
    got = cpu_attention.scaled_dot_product_attention(
        queries, keys16, values16, cache16, 0.125, mask
    )
    assert got.dtype == mx.float32
    # Unit-scale entries rounded to 11 (8) significant bits.
    bound = 2e-3 if dtype == mx.float16 else 1.6e-2
    assert float(mx.abs(got - exact).max()) < bound
    assert float(mx.abs(got - exact).max()) > 0  # really read from 16 bits


def test_the_engine_stores_16_bits_and_its_budget_says_so(tiny_model_dir):
    from app.core.engine.loader import load_model_folder

    loaded = load_model_folder(tiny_model_dir)
    assert kv_storage.installed()
    assert loaded.info.activation_dtype == "float32"
    assert loaded.info.kv_dtype in ("float16", "bfloat16")
    from mlx_lm.models.cache import make_prompt_cache

    cache = make_prompt_cache(loaded.model)
    loaded.model(mx.random.randint(0, 200, (1, 300)), cache=cache)
    mx.eval([c.state for c in cache])
    held = sum(c.nbytes for c in cache)
    geometry = read_geometry(tiny_model_dir)
    assert held == kv_bytes_at(geometry, 300, act_dtype_bytes=2)
    assert held * 2 == kv_bytes_at(geometry, 300, act_dtype_bytes=4)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_greedy_text_is_the_same_as_with_a_float32_cache(tiny_model_dir, dtype):
    from mlx_lm import generate

    from app.core.engine.loader import load_model_folder

    loaded = load_model_folder(tiny_model_dir)
    prompt = "The cache stores keys and values " * 20
    texts = {}
    for stored in (None, dtype):
        with kv_storage.storing(stored):
            texts[stored] = generate(
                loaded.model, loaded.tokenizer, prompt, max_tokens=24
            )
    assert texts[None] == texts[dtype]
    assert texts[None]
