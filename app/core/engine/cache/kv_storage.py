"""The dtype a KV cache stores: 16-bit floats on the CPU backend, computing in float32.

On the CPU backend the engine computes in float32 (`cpu.backend`), and mlx-lm's caches
store keys and values in the dtype they arrive in: a "16-bit" cache held 4 bytes per
element there, twice llama.cpp's f16 cache, and a quantized cache's scales and biases
were float32 too. With `install`, every key and value a cache receives is narrowed to a
16-bit float first, so the dense cache holds 2 bytes per element and a quantized one
2-byte scales and biases (8-bit, group 64: 1.0625 bytes per element, as llama.cpp's
q8_0), while attention widens what it reads back to float32 (`cpu_attention`, the
native KV kernel in registers).

Which 16-bit float: float16 keeps 3 more mantissa bits than bfloat16 (llama.cpp's
choice), but MLX's CPU build widens it element by element in software (0.93 ms per
million elements on the 2-core reference machine, bfloat16 0.08 ms: a shift). So float16
when the native KV kernel reads the cache (it widens in registers, F16C), bfloat16
when attention must widen with MLX ops.

mlx-lm's model code calls ``cache.update_and_fetch`` itself, before attention, so the
narrowing sits in that method of mlx-lm's ``KVCache``, ``QuantizedKVCache`` and
``RotatingKVCache`` (every subclass, Swapless's shifted caches included, goes through
them); `AgedKVCache` narrows with `narrowed`. Only float32 inputs are narrowed: Metal
never installs this and keeps the model's own dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache, QuantizedKVCache, RotatingKVCache

STORAGE_BYTES = 2
"""Bytes per stored element of a dense cache (and per scale or bias of a quantized
one) while `install` is in effect."""

_storage: mx.Dtype | None = None
# Any: the classes' methods are replaced, which mypy refuses on a declared type.
_CLASSES: tuple[Any, ...] = (KVCache, QuantizedKVCache, RotatingKVCache)
_ORIGINAL: dict[Any, Callable] = {cls: cls.update_and_fetch for cls in _CLASSES}


def storage_dtype() -> mx.Dtype | None:
    """The 16-bit dtype caches store float32 keys and values in, or None (as given)."""
    return _storage


def narrowed(x: mx.array, like: mx.Dtype | None = None) -> mx.array:
    """``x`` in the dtype a cache stores it in.

    Args:
        x: Keys or values as the model computed them.
        like: The dtype the cache already holds, if any: a 16-bit cache keeps its own
            (a cache saved under the other 16-bit choice is not mixed, which would
            widen the whole buffer on its next growth), and a float32 one (made before
            `install`) stays float32.
    """
    if _storage is None or x.dtype != mx.float32:
        return x
    if like is None:
        return x.astype(_storage)
    return x if like == mx.float32 else x.astype(like)


def computed_dtype(stored: mx.Dtype) -> mx.Dtype:
    """The dtype attention computes in for entries stored as ``stored``."""
    if _storage is not None and stored in (mx.float16, mx.bfloat16):
        return mx.float32
    return stored


def _held_dtype(cache) -> mx.Dtype | None:
    keys = cache.keys
    if keys is None:
        return None
    if isinstance(keys, tuple | list):
        return keys[1].dtype  # quantized: the scales carry the stored float dtype
    return keys.dtype


def _narrowing(cls: Any) -> Callable:
    original = _ORIGINAL[cls]

    def update_and_fetch(self, keys, values):
        like = _held_dtype(self)
        return original(self, narrowed(keys, like), narrowed(values, like))

    update_and_fetch.__doc__ = original.__doc__
    update_and_fetch.narrows = True  # type: ignore[attr-defined]
    return update_and_fetch


def install(dtype: mx.Dtype) -> None:
    """Store float32 keys and values as ``dtype`` (float16 or bfloat16) from now on.

    Idempotent; a second call changes the dtype of caches created afterwards.

    Raises:
        ValueError: ``dtype`` is not a 16-bit float.
    """
    global _storage
    if dtype not in (mx.float16, mx.bfloat16):
        raise ValueError(f"KV storage must be float16 or bfloat16, not {dtype}")
    _storage = dtype
    for cls in _ORIGINAL:
        cls.update_and_fetch = _narrowing(cls)


def uninstall() -> None:
    """Store keys and values as they arrive again (mlx-lm's own behaviour)."""
    global _storage
    _storage = None
    for cls, original in _ORIGINAL.items():
        cls.update_and_fetch = original


def installed() -> bool:
    """True while caches narrow float32 keys and values."""
    return _storage is not None


@contextmanager
def storing(dtype: mx.Dtype | None) -> Iterator[None]:
    """Store as ``dtype`` (None: as given, mlx-lm's way) inside the block; the previous
    choice after it (tests and the bench compare both in one process)."""
    previous = _storage
    if dtype is None:
        uninstall()
    else:
        install(dtype)
    try:
        yield
    finally:
        if previous is None:
            uninstall()
        else:
            install(previous)
