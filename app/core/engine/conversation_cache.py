"""The KV cache of one conversation, kept across turns, and the token ids it holds.

A new turn reuses the longest common prefix of the cached ids and the new prompt's ids
and trims whatever the cache holds past it, so only the remainder is prefilled
(shared/NOTES-mlx.md: greedy output with reuse equals a full re-prefill).
"""

from __future__ import annotations

import copy

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.models.cache import QuantizedKVCache, make_prompt_cache

from app.core.engine.shifted_cache import shifted, spliceable, stored_length
from app.core.errors import KnownError
from app.core.generation_settings import KVSettings
from app.core.token_ids import common_prefix_length

# mlx-lm's KV caches allocate in steps of this many tokens.
ALLOCATION_STEP = 256


class SpliceUnsupported(Exception):
    """A cache that cannot be spliced; the caller rebuilds instead."""


class ConversationCache:
    """A per-layer KV cache plus the exact token ids whose keys and values it holds.

    Args:
        model: The loaded model (decides the cache classes, e.g. sliding windows).
        kv: The precision this cache is created for.
    """

    def __init__(self, model: nn.Module, kv: KVSettings):
        self.model = model
        self.kv = kv
        self.layers: list = make_prompt_cache(model)
        self.token_ids: list[int] = []
        # The rotary position of every stored entry; it differs from the index after a
        # splice dropped entries from the middle.
        self.positions: list[int] = []
        self._check_quantizable()

    def _check_quantizable(self) -> None:
        if not self.kv.quantized:
            return
        for layer in self.layers:
            if not hasattr(layer, "to_quantized") and not isinstance(
                layer, QuantizedKVCache
            ):
                raise KnownError(
                    f"This model's cache ({type(layer).__name__}) cannot be quantized; "
                    "use 16-bit KV for it."
                )
            if type(layer).__name__ == "RotatingKVCache":
                raise KnownError(
                    "This model uses sliding-window layers, whose cache mlx-lm cannot "
                    "quantize yet; use 16-bit KV for it."
                )
        head_dim = layer_head_dim(self.model)
        if head_dim and head_dim % self.kv.group_size:
            valid = [str(g) for g in (32, 64, 128) if head_dim % g == 0]
            raise ValueError(
                f"kv_group {self.kv.group_size} does not divide this model's head "
                f"dimension {head_dim}; use one of {', '.join(valid)}"
            )

    @property
    def offset(self) -> int:
        """Tokens held by the cache."""
        return stored_length(self.layers[0]) if self.layers else 0

    @property
    def next_position(self) -> int:
        """The rotary position the next token will get."""
        return int(getattr(self.layers[0], "offset", 0)) if self.layers else 0

    def sync_positions(self) -> None:
        """Bring `positions` in line with what the layers hold now.

        Entries appended since the last sync are contiguous and end at `next_position`;
        a trim removed the newest ones.
        """
        held = self.offset
        if len(self.positions) > held:
            del self.positions[held:]
        elif len(self.positions) < held:
            added = held - len(self.positions)
            self.positions.extend(range(self.next_position - added, self.next_position))

    @property
    def nbytes(self) -> int:
        """Bytes the cache's arrays occupy (allocation, in 256-token steps)."""
        return sum(layer.nbytes for layer in self.layers if not layer.empty())

    @property
    def bits_in_use(self) -> int:
        """Precision the stored entries have now (16 until quantization starts)."""
        for layer in self.layers:
            if isinstance(layer, QuantizedKVCache):
                return int(layer.bits)
        return 16

    def matches_precision(self, kv: KVSettings) -> bool:
        """Return True when this cache can continue under the requested precision."""
        quantized = [
            layer for layer in self.layers if isinstance(layer, QuantizedKVCache)
        ]
        if not quantized:
            # Unquantized entries convert on their own once quantized_kv_start is passed.
            return True
        if not kv.quantized:
            return False
        return all(
            layer.bits == kv.bits and layer.group_size == kv.group_size
            for layer in quantized
        )

    def trim_to(self, keep: int) -> None:
        """Drop every entry after the first ``keep`` tokens.

        Args:
            keep: Tokens to keep, at most the current length.
        """
        self.sync_positions()
        excess = self.offset - keep
        if excess > 0:
            trimmed = [layer.trim(excess) for layer in self.layers]
            if any(n != excess for n in trimmed):
                raise RuntimeError(f"cache trim removed {trimmed} instead of {excess}")
        self.token_ids = self.token_ids[:keep]
        self.sync_positions()
        self._continue_after_last_kept()
        self._release_spare_steps()

    def contiguous_prefix(self) -> int:
        """Leading entries still at their natural positions (0, 1, 2, ...)."""
        self.sync_positions()
        for index, position in enumerate(self.positions):
            if position != index:
                return index
        return len(self.positions)

    def _continue_after_last_kept(self) -> None:
        """Make the next token follow the last kept entry's rotary position.

        Trimming back across a splice would otherwise leave the splice's gap in front of
        every new token; with it closed, a rebuild after splices is exactly a fresh
        prefill again.
        """
        held = self.offset
        following = self.positions[held - 1] + 1 if held else 0
        for layer in self.layers:
            if hasattr(layer, "gap"):
                layer.gap = following - held
                layer.offset = following

    def _release_spare_steps(self) -> None:
        """Give back whole allocation steps a trim left unused.

        mlx-lm's caches grow in 256-token steps and never shrink; worse, a cache trimmed
        to an exact multiple of the step appends its next chunk after the spare step
        instead of into it (measured: 1.17x the predicted bytes). Cutting the arrays to
        the stored length keeps the allocation what the budget predicts.
        """
        for layer in self.layers:
            if not spliceable([layer]) or layer.keys is None:
                continue
            stored = stored_length(layer)
            first = (
                layer.keys[0] if isinstance(layer.keys, tuple | list) else layer.keys
            )
            target = (
                stored
                if stored % ALLOCATION_STEP == 0
                else (-(-stored // ALLOCATION_STEP) * ALLOCATION_STEP)
            )
            if first.shape[2] - target >= ALLOCATION_STEP:
                layer.keys, layer.values = tree_map(
                    lambda x, t=target: mx.contiguous(x[..., :t, :]),
                    (layer.keys, layer.values),
                )

    def can_trim(self) -> bool:
        """Return True when every layer supports dropping its newest entries."""
        return all(layer.is_trimmable() for layer in self.layers)

    def prepare_for(self, prompt_ids: list[int]) -> int:
        """Make the cache a prefix of ``prompt_ids`` and return how many ids it holds.

        At least one prompt token is always left to prefill, since generation needs the
        logits of the last prompt token.

        Args:
            prompt_ids: The full prompt of the coming turn.

        Returns:
            The number of prompt tokens reused from the cache.
        """
        reuse = common_prefix_length(self.token_ids, prompt_ids)
        return self.keep_at_most(min(reuse, len(prompt_ids) - 1))

    def keep_at_most(self, keep: int) -> int:
        """Drop every entry after the first ``keep``; return how many are kept.

        A cache that cannot drop its newest entries starts over empty instead.
        """
        if keep < self.offset:
            if not self.can_trim():
                self.reset()
                return 0
            self.trim_to(keep)
        return min(keep, self.offset)

    def reconcile(self, ids: list[int]) -> None:
        """Record ``ids`` as the cache's content, fixing any off-by-one at the end.

        After generation the cache holds the prompt plus every token fed back into the
        model; ``ids`` is what the caller believes was fed. Whichever is longer is cut.
        """
        held = self.offset
        if held > len(ids):
            self.token_ids = list(ids)
            self.trim_to(len(ids))
        else:
            self.token_ids = list(ids[:held])
        self.sync_positions()

    def reset(self) -> None:
        """Forget everything (a fresh cache of the same precision)."""
        self.layers = make_prompt_cache(self.model)
        self.token_ids = []
        self.positions = []

    def clone(self) -> ConversationCache:
        """Return an independent deep copy (plain copies share MLX buffers)."""
        twin = ConversationCache.__new__(ConversationCache)
        twin.model = self.model
        twin.kv = self.kv
        twin.layers = copy.deepcopy(self.layers)
        twin.token_ids = list(self.token_ids)
        twin.positions = list(self.positions)
        return twin

    def can_splice(self) -> bool:
        """True when entries can be dropped from the middle of this cache."""
        return spliceable(self.layers)

    def splice(self, keep: int, drop_until: int, insert_ids: list[int]) -> int:
        """Replace the entries ``[keep, drop_until)`` by fresh KV of ``insert_ids``.

        The kept entries are not recomputed: only ``insert_ids`` are run through the
        model, attending to the first ``keep`` entries, at the rotary positions just
        before the first entry kept after the cut, so every kept entry keeps its
        relative distances.

        Args:
            keep: Entries kept at the start (the system prompt).
            drop_until: First entry kept after the dropped span.
            insert_ids: Token ids placed where the dropped span was (the summary).

        Returns:
            The number of tokens run through the model.

        Raises:
            SpliceUnsupported: If this cache cannot be spliced this way; rebuild instead.
        """
        held = self.offset
        if not self.can_splice():
            kinds = sorted({type(layer).__name__ for layer in self.layers})
            raise SpliceUnsupported(
                f"this model's cache ({', '.join(kinds)}) cannot be spliced"
            )
        if not 0 < keep <= drop_until <= held:
            raise ValueError(
                f"bad splice span keep={keep} drop_until={drop_until} held={held}"
            )
        self.sync_positions()
        end = self.positions[drop_until] if drop_until < held else self.next_position
        start = end - len(insert_ids)
        if start <= self.positions[keep - 1]:
            raise SpliceUnsupported(
                f"the inserted text ({len(insert_ids)} tokens) is longer than the span it "
                f"replaces ({end - self.positions[keep - 1] - 1} positions)"
            )
        heads = []
        for layer in self.layers:
            head = shifted(layer, gap=start - keep)
            head.keys, head.values = tree_map(
                lambda x: x[..., :keep, :], (layer.keys, layer.values)
            )
            head.offset = start
            heads.append(head)
        if insert_ids:
            self.model(mx.array(insert_ids)[None], cache=heads)
        spliced = []
        kept_tail = held - drop_until
        for layer, head in zip(self.layers, heads, strict=True):
            joined = tree_map(
                lambda h, old: mx.concatenate(
                    [h[..., : keep + len(insert_ids), :], old[..., drop_until:held, :]],
                    axis=2,
                ),
                (head.keys, head.values),
                (layer.keys, layer.values),
            )
            twin = shifted(layer, gap=0)
            twin.keys, twin.values = joined
            twin.offset = int(layer.offset)
            twin.gap = twin.offset - (keep + len(insert_ids) + kept_tail)
            spliced.append(twin)
        mx.eval([layer.state for layer in spliced])
        self.layers = spliced
        self.token_ids = (
            self.token_ids[:keep] + list(insert_ids) + self.token_ids[drop_until:held]
        )
        self.positions = (
            self.positions[:keep]
            + list(range(start, end))
            + self.positions[drop_until:held]
        )
        return len(insert_ids)

    def evaluate(self) -> None:
        """Force pending cache computations (before timing or measuring memory)."""
        mx.eval([layer.state for layer in self.layers if not layer.empty()])


def layer_head_dim(model: nn.Module) -> int | None:
    """Return the attention head dimension of the model's first attention layer."""
    layers = getattr(model, "layers", None) or []
    for layer in layers:
        attention = getattr(layer, "self_attn", None)
        head_dim = getattr(attention, "head_dim", None)
        if head_dim:
            return int(head_dim)
    args = getattr(model, "args", None)
    if args is not None:
        head_dim = getattr(args, "head_dim", None)
        if head_dim:
            return int(head_dim)
        hidden = getattr(args, "hidden_size", None)
        heads = getattr(args, "num_attention_heads", None)
        if hidden and heads:
            return int(hidden) // int(heads)
    return None
