"""The cache of one conversation, kept across turns, and the token ids it holds.

A new turn reuses the longest common prefix of the cached ids and the new prompt's ids
and rewinds the cache to it, so only the remainder is prefilled (shared/NOTES-mlx.md:
greedy output with reuse equals a full re-prefill). How a rewind works depends on the
kinds of entry the model has (`cache_layers`): full-attention entries drop their newest
tokens exactly; sliding-window and recurrent entries cannot always, so the cache keeps
a few `cache_checkpoints` of them at message boundaries and a rewind restores the
nearest one at or before the reused length (the full-attention entries are trimmed to
the same length), or starts over when there is none.

Quantized KV applies where it pays: the full-attention entries, the only ones that
grow, are quantized at the requested bits and group, or aged (`aged_cache`: the newest
tokens exact, older ones at lower precision, tier by tier); bounded entries stay at the
activation dtype.
"""

from __future__ import annotations

import copy

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.models.cache import make_prompt_cache

from app.core.budget.aged_budget import validate_aging
from app.core.budget.kv_budget import validate_kv_quantization
from app.core.engine.cache import cache_layers
from app.core.engine.cache.aged_cache import AgedKVCache
from app.core.engine.cache.cache_checkpoints import Checkpoints
from app.core.engine.cache.cache_layers import (
    can_drop_newest,
    is_bounded,
    quantize_growing_layers,
    quantized_bits,
)
from app.core.engine.cache.cache_splice import splice_layers, unspliceable_reason
from app.core.engine.cache.shifted_cache import spliceable, stored_length
from app.core.engine.events import LayerGroup
from app.core.presets.generation_settings import KVSettings
from app.core.token_ids import common_prefix_length

__all__ = ["ConversationCache", "SpliceUnsupported", "common_prefix_length"]

# mlx-lm's KV caches allocate in steps of this many tokens.
ALLOCATION_STEP = 256


class SpliceUnsupported(Exception):
    """A cache that cannot be spliced; the caller rebuilds instead."""


class ConversationCache:
    """A per-layer cache plus the exact token ids whose state it holds.

    Args:
        model: The loaded model (decides the cache classes, e.g. sliding windows).
        kv: The precision this cache is created for.

    Raises:
        ValueError: The quantization group does not divide the head size of the
            full-attention layers (the ones quantized).
    """

    def __init__(self, model: nn.Module, kv: KVSettings):
        self.model = model
        self.kv = kv
        self.layers: list = make_prompt_cache(model)
        self.token_ids: list[int] = []
        # The rotary position of every stored entry; it differs from the index after a
        # splice dropped entries from the middle.
        self.positions: list[int] = []
        self.checkpoints = Checkpoints()
        # How the last rewind went: "none", "trim", "checkpoint" or "reset".
        self.last_rewind = "none"
        # Prompt tokens per prefill chunk, adapted to how long chunks take, so a cancel
        # between chunks is noticed within a fraction of a second (`prefill_range`).
        self.prefill_step: int | None = None
        self.dense_view = cache_layers.dense_view_indices(model, self.layers)
        self._check_quantizable()
        self._age_from_start()

    def _check_quantizable(self) -> None:
        if not self.kv.quantized:
            return
        head_dims = cache_layers.full_attention_head_dims(self.model, self.layers)
        if not head_dims:
            fallback = layer_head_dim(self.model)
            head_dims = [fallback] if fallback else []
        if self.kv.aging is not None:
            validate_aging(self.kv.aging, self.kv.group_size, head_dims)
        else:
            validate_kv_quantization(self.kv.bits, self.kv.group_size, head_dims)

    def _age_from_start(self) -> None:
        """With aging, make the full-attention entries aged caches before any token."""
        if self.kv.aging is not None:
            self.quantize()

    # -- what the cache holds --------------------------------------------------------

    @property
    def _reference(self):
        """The first entry that counts tokens (recurrent entries do not)."""
        return next((layer for layer in self.layers if hasattr(layer, "offset")), None)

    @property
    def offset(self) -> int:
        """Tokens held by the cache."""
        reference = self._reference
        if reference is None:
            return len(self.token_ids)
        return stored_length(reference)

    @property
    def next_position(self) -> int:
        """The rotary position the next token will get."""
        reference = self._reference
        if reference is None:
            return len(self.token_ids)
        return int(reference.offset)

    @property
    def has_bounded_layers(self) -> bool:
        """True when some entries (sliding windows, recurrent state) need checkpoints."""
        return any(is_bounded(layer) for layer in self.layers)

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
        """Bytes the live entries occupy (allocation, in 256-token steps)."""
        return sum(layer.nbytes for layer in self.layers if not layer.empty())

    @property
    def checkpoint_nbytes(self) -> int:
        """Bytes the state checkpoints keep alive besides the live entries."""
        return self.checkpoints.nbytes

    @property
    def resident_bytes(self) -> int:
        """Live entries plus checkpoints: what the memory budget counts."""
        return self.nbytes + self.checkpoint_nbytes

    @property
    def bits_in_use(self) -> int:
        """Precision of the full-attention entries now (16 until quantization starts)."""
        for layer in self.layers:
            quantized = quantized_bits(layer)
            if quantized:
                return quantized[0]
        return 16

    def layer_groups(self) -> tuple[LayerGroup, ...]:
        """Which entries are at which precision, with their bytes."""
        return cache_layers.layer_groups(self.layers)

    def matches_precision(self, kv: KVSettings) -> bool:
        """Return True when this cache can continue under the requested precision.

        An aged cache continues only under the same tiers and group; a cache whose
        entries are all still unquantized continues under any precision (it converts).
        """
        aged = [layer for layer in self.layers if isinstance(layer, AgedKVCache)]
        if aged:
            return kv.aging is not None and all(
                layer.aging == kv.aging and layer.group_size == kv.group_size
                for layer in aged
            )
        quantized = [quantized_bits(layer) for layer in self.layers]
        quantized = [q for q in quantized if q]
        if not quantized:
            # Unquantized entries convert on their own once quantized_kv_start is passed.
            return True
        if not kv.quantized or kv.aging is not None:
            return False
        return all(q == (kv.bits, kv.group_size) for q in quantized)

    def quantize(self) -> None:
        """Quantize the full-attention entries that reached ``quantized_kv_start``, or
        with aging move the blocks that passed a tier's size down a tier."""
        quantize_growing_layers(self.layers, self.kv, self.dense_view)

    # -- checkpoints -----------------------------------------------------------------

    def checkpoint(self) -> None:
        """Checkpoint the bounded entries at the current length (no-op without any)."""
        if not self.has_bounded_layers or not self.offset:
            return
        self.evaluate()
        self.checkpoints.take(self.offset, self.layers)

    def _restore(self, position: int) -> bool:
        """Go back to the checkpoint at or before ``position``; False when none."""
        found = self.checkpoints.nearest(position)
        if found is None:
            return False
        held = self.offset
        for index, layer in enumerate(self.layers):
            if index in found.snapshots:
                self.layers[index] = cache_layers.restore(found.snapshots[index])
            elif not is_bounded(layer) and not layer.empty():
                layer.trim(held - found.position)
        self.token_ids = self.token_ids[: found.position]
        self.positions = self.positions[: found.position]
        self.checkpoints.discard_after(found.position)
        self._release_spare_steps()
        return True

    # -- rewinding -------------------------------------------------------------------

    def can_trim(self) -> bool:
        """Return True when every entry can drop its newest entries right now."""
        return all(can_drop_newest(layer, 1) for layer in self.layers)

    def rewind(self, keep: int) -> int:
        """Make the cache hold at most its first ``keep`` tokens; return how many it holds.

        Exact trims where every entry allows it; otherwise the nearest checkpoint at or
        before ``keep``; otherwise an empty cache. `last_rewind` says which.
        """
        self.sync_positions()
        held = self.offset
        if keep >= held:
            self.last_rewind = "none"
            return held
        excess = held - keep
        if all(can_drop_newest(layer, excess) for layer in self.layers):
            trimmed = [layer.trim(excess) for layer in self.layers if not layer.empty()]
            if any(n != excess for n in trimmed):
                raise RuntimeError(f"cache trim removed {trimmed} instead of {excess}")
            self.token_ids = self.token_ids[:keep]
            self.sync_positions()
            self._continue_after_last_kept()
            self._release_spare_steps()
            self.checkpoints.discard_after(keep)
            self.last_rewind = "trim"
            return keep
        if self._restore(keep):
            self.last_rewind = "checkpoint"
            return self.offset
        self.reset()
        self.last_rewind = "reset"
        return 0

    def trim_to(self, keep: int) -> int:
        """Drop every entry after the first ``keep`` tokens (see `rewind`)."""
        return self.rewind(keep)

    def keep_at_most(self, keep: int) -> int:
        """Drop every entry after the first ``keep``; return how many are kept."""
        return self.rewind(keep)

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
            if isinstance(layer, AgedKVCache):
                layer.release_spare()
                continue
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

    def reconcile(self, ids: list[int]) -> None:
        """Record ``ids`` as the cache's content, fixing any off-by-one at the end.

        After generation the cache holds the prompt plus every token fed back into the
        model; ``ids`` is what the caller believes was fed. Whichever is longer is cut.
        """
        held = self.offset
        if held > len(ids):
            self.token_ids = list(ids)
            self.rewind(len(ids))
        else:
            self.token_ids = list(ids[:held])
        self.sync_positions()

    def reset(self) -> None:
        """Forget everything (a fresh cache of the same precision)."""
        self.layers = make_prompt_cache(self.model)
        self.token_ids = []
        self.positions = []
        self.checkpoints.clear()
        self._age_from_start()

    def clone(self) -> ConversationCache:
        """Return an independent deep copy (plain copies share MLX buffers).

        Every field is carried over from ``__dict__``, so one added to ``__init__``
        later cannot be forgotten; the mutable ones are then replaced by copies (the
        model and the immutable settings are shared). A test checks that no mutable
        field stays shared.
        """
        twin = ConversationCache.__new__(ConversationCache)
        twin.__dict__.update(self.__dict__)
        twin.layers = copy.deepcopy(self.layers)
        twin.token_ids = list(self.token_ids)
        twin.positions = list(self.positions)
        twin.checkpoints = self.checkpoints.copy()
        return twin

    # -- prefixes --------------------------------------------------------------------

    def layers_at(self, length: int) -> list | None:
        """Independent entries holding exactly the first ``length`` tokens, or None.

        Full-attention entries are sliced; bounded entries come from the checkpoint at
        exactly ``length`` (there is none unless one was taken at that boundary).
        Used to store a prefix (the system prompt) in the prefix cache.
        """
        if length <= 0 or length > self.offset:
            return None
        if self.contiguous_prefix() < length:
            return None  # spliced: the entries are not at their natural positions
        saved = self.checkpoints.at(length) if self.has_bounded_layers else None
        if self.has_bounded_layers and saved is None:
            return None
        result = []
        for index, layer in enumerate(self.layers):
            if is_bounded(layer):
                assert saved is not None, "bounded layers returned early without one"
                result.append(cache_layers.restore(saved.snapshots[index]))
            else:
                result.append(cache_layers.sliced_copy(layer, length))
        mx.eval([layer.state for layer in result if not layer.empty()])
        return result

    def adopt(self, layers: list, token_ids: list[int]) -> None:
        """Replace the content with ``layers`` holding ``token_ids`` (a stored prefix).

        The layers are copied; entries this model must hand attention dense arrays
        are re-wrapped, and a checkpoint is taken at the prefix boundary so later
        rewinds can come back to it.
        """
        self.layers = [
            cache_layers.adapted(layer, index in self.dense_view)
            for index, layer in enumerate(copy.deepcopy(layers))
        ]
        self.token_ids = list(token_ids)
        self.positions = []
        self.sync_positions()
        self.checkpoints.clear()
        self.checkpoint()

    # -- splicing --------------------------------------------------------------------

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
            raise SpliceUnsupported(unspliceable_reason(self.layers))
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
        self.layers = splice_layers(
            self.model, self.layers, keep, drop_until, held, start, insert_ids
        )
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
