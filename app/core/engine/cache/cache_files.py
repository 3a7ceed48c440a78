"""Cache files in mlx-lm's prompt-cache format, readable back with Swapless's own classes.

``mlx_lm.models.cache.save_prompt_cache`` writes a safetensors file holding every
entry's ``state`` and class name; its ``load_prompt_cache`` finds each class by name in
mlx-lm's own module, so an entry of a class defined elsewhere (the aged cache,
`aged_cache.AgedKVCache`) would not load (shared/NOTES-mlx.md). Files are written with
mlx-lm's ``save_prompt_cache`` and read here with the same steps, looking classes up in mlx-lm's
module and then in Swapless's: a file without aged entries is exactly mlx-lm's, and
mlx-lm can read it.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
from mlx.utils import tree_unflatten
from mlx_lm.models import cache as mlx_lm_cache

from app.core.engine.cache.aged_cache import AgedKVCache

__all__ = ["load_cache_file"]

_SWAPLESS_CLASSES = {"AgedKVCache": AgedKVCache}


def load_cache_file(path: str) -> tuple[list, dict]:
    """Read a cache file: its entries and its metadata.

    Raises:
        KeyError: An entry of a class neither mlx-lm nor Swapless knows.
        ValueError: A scalar of an unknown kind (not a prompt-cache file).
    """
    loaded = mx.load(path, return_metadata=True)
    assert isinstance(loaded, tuple), "return_metadata=True gives (arrays, metadata)"
    arrays: dict[str, Any] = loaded[0]
    raw_metadata = loaded[1]
    metadata, classes, scalars = tree_unflatten(list(raw_metadata.items()))
    for position, kind in scalars[1:]:
        array = arrays[position]
        if kind == "scalar":
            arrays[position] = array.item()
        elif kind == "string":
            arrays[position] = "".join(chr(code) for code in array.tolist())
        elif kind == "none":
            arrays[position] = None
        else:
            raise ValueError(f"unknown scalar kind {kind!r} in {path}")
    states = tree_unflatten(list(arrays.items()))
    # Not strict, as in mlx-lm: entries with an empty state leave no arrays.
    pairs = zip(classes, states, strict=False)
    layers = [_class(name).from_state(state) for name, state in pairs]
    return layers, metadata


def _class(name: str):
    found = _SWAPLESS_CLASSES.get(name) or getattr(mlx_lm_cache, name, None)
    if found is None or not hasattr(found, "from_state"):
        raise KeyError(f"unknown cache class {name!r}")
    return found
