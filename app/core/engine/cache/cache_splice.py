"""Splicing a conversation's cache: fresh KV for a span in the middle, the rest kept as is.

A trim that summarises old turns replaces their entries by the summary's. Recomputing
everything after the cut would cost a prefill of the whole kept history; a splice
computes only the summary (attending to the entries kept before it, at the rotary
positions just before the first entry kept after it) and joins it between the kept
entries, whose own relative distances stay exact (`shifted_cache`).

Every full-attention kind joins: plain and quantized caches by concatenating their
arrays, aged caches (`aged_cache`) tier by tier, the summary lowered to the tier of the
entries after it so precision still falls with age. Sliding windows and recurrent state
cannot drop entries from the middle; the caller rebuilds those from a checkpoint.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map

from app.core.engine.cache import aged_cache, cache_layers
from app.core.engine.cache.aged_cache import AgedKVCache
from app.core.engine.cache.shifted_cache import shifted


def splice_layers(
    model: nn.Module,
    layers: list,
    keep: int,
    drop_until: int,
    held: int,
    start: int,
    insert_ids: list[int],
) -> list:
    """New entries: the first ``keep``, ``insert_ids``' fresh KV, then ``[drop_until, held)``.

    Args:
        model: Computes the inserted tokens' KV.
        layers: The cache entries (all spliceable; left unchanged).
        keep: Entries kept at the start.
        drop_until: First entry kept after the dropped span.
        held: Entries held.
        start: Rotary position of the first inserted token.
        insert_ids: The tokens placed where the span was.

    Returns:
        The spliced entries, evaluated.
    """
    heads = [_head(layer, keep, start) for layer in layers]
    if insert_ids:
        model(mx.array(insert_ids)[None], cache=heads)
    joined_length = keep + len(insert_ids)
    spliced = [
        _joined(layer, head, joined_length, drop_until, held)
        for layer, head in zip(layers, heads, strict=True)
    ]
    mx.eval([layer.state for layer in spliced])
    return spliced


def _head(layer, keep: int, start: int):
    """A cache holding ``layer``'s first ``keep`` entries, its next position ``start``."""
    if isinstance(layer, AgedKVCache):
        head = layer.first(keep)
        head.gap = start - keep
        head.offset = start
        return head
    head = shifted(layer, gap=start - keep)
    head.keys, head.values = tree_map(
        lambda x: x[..., :keep, :], (layer.keys, layer.values)
    )
    head.offset = start
    return head


def _joined(layer, head, joined_length: int, drop_until: int, held: int):
    if isinstance(layer, AgedKVCache):
        return aged_cache.joined(head, joined_length, layer, drop_until, held)
    joined = tree_map(
        lambda h, old: mx.concatenate(
            [h[..., :joined_length, :], old[..., drop_until:held, :]], axis=2
        ),
        (head.keys, head.values),
        (layer.keys, layer.values),
    )
    twin = shifted(layer, gap=0)
    twin.keys, twin.values = joined
    twin.offset = int(layer.offset)
    twin.gap = twin.offset - (joined_length + held - drop_until)
    return twin


def unspliceable_reason(layers: list) -> str:
    """Why these entries cannot be spliced, in words."""
    kinds = {cache_layers.layer_kind(layer) for layer in layers}
    reasons = []
    if "sliding_attention" in kinds:
        reasons.append("sliding-window layers (RotatingKVCache)")
    if "constant_state" in kinds:
        reasons.append("recurrent layers (ArraysCache)")
    if not reasons:
        names = sorted({type(layer).__name__ for layer in layers})
        return f"this model's cache ({', '.join(names)}) cannot be spliced"
    return (
        f"this model's cache has {' and '.join(reasons)}, which cannot drop tokens "
        "from the middle; it is rebuilt from the nearest state checkpoint"
    )
