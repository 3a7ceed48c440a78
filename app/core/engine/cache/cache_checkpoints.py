"""Checkpoints of a conversation's bounded cache entries, for rewinding without a re-prefill.

A recurrent state (and a sliding window that has slid) cannot drop its newest tokens, so
a new turn that shares all but the tail of the cached history would have to prefill the
whole history again. Instead the engine keeps a few checkpoints: copies of the bounded
entries' state at message boundaries (the end of the system prompt, the end of each
prompt, the end of each reply). Rewinding to length ``n`` restores the nearest
checkpoint at or before ``n``, trims the full-attention entries to it (exact), and
prefills only the rest.

The number kept is bounded by `app.core.budget.kv_budget.STATE_CHECKPOINTS`, which the
memory budget counts: the first checkpoint (usually the system prompt's) is kept for
trims and prefix reuse, the others are the most recent.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from app.core.budget.kv_budget import STATE_CHECKPOINTS
from app.core.engine.cache.cache_layers import is_bounded, snapshot, snapshot_nbytes


@dataclass
class Checkpoint:
    """The bounded entries of a cache after its first ``position`` tokens.

    Attributes:
        position: Tokens the cache held.
        snapshots: Entry index -> `cache_layers.snapshot` of that bounded entry.
        nbytes: Bytes the snapshots keep alive.
    """

    position: int
    snapshots: dict[int, tuple] = field(default_factory=dict)
    nbytes: int = 0


class Checkpoints:
    """A bounded, position-ordered set of `Checkpoint`s of one cache.

    Args:
        limit: Most checkpoints kept (at least 1).
    """

    def __init__(self, limit: int = STATE_CHECKPOINTS):
        if limit < 1:
            raise ValueError(f"checkpoint limit must be at least 1, got {limit}")
        self.limit = limit
        self._items: list[Checkpoint] = []

    def __len__(self) -> int:
        return len(self._items)

    @property
    def positions(self) -> list[int]:
        """Positions of the kept checkpoints, ascending."""
        return [item.position for item in self._items]

    @property
    def nbytes(self) -> int:
        """Bytes all checkpoints keep alive."""
        return sum(item.nbytes for item in self._items)

    def take(self, position: int, layers: list) -> Checkpoint:
        """Checkpoint the bounded entries of ``layers``, which hold ``position`` tokens.

        A checkpoint at the same position is replaced. Past the limit, the oldest one
        after the first is dropped.
        """
        snapshots = {
            i: snapshot(layer) for i, layer in enumerate(layers) if is_bounded(layer)
        }
        item = Checkpoint(
            position=position,
            snapshots=snapshots,
            nbytes=sum(snapshot_nbytes(s) for s in snapshots.values()),
        )
        self._items = [old for old in self._items if old.position != position]
        self._items.append(item)
        self._items.sort(key=lambda c: c.position)
        while len(self._items) > self.limit:
            # Keep the first (the system prompt's, for trims and prefixes) and the
            # newest; the oldest of the rest goes.
            del self._items[1 if self.limit > 1 else 0]
        return item

    def nearest(self, position: int) -> Checkpoint | None:
        """The checkpoint with the largest position not past ``position``, or None."""
        found = None
        for item in self._items:
            if item.position <= position:
                found = item
        return found

    def at(self, position: int) -> Checkpoint | None:
        """The checkpoint at exactly ``position``, or None."""
        return next((c for c in self._items if c.position == position), None)

    def discard_after(self, position: int) -> None:
        """Forget checkpoints past ``position`` (their history was rewound away)."""
        self._items = [c for c in self._items if c.position <= position]

    def clear(self) -> None:
        """Forget every checkpoint."""
        self._items = []

    def copy(self) -> Checkpoints:
        """An independent copy (snapshots are immutable, so they are shared).

        Every field is carried over from ``__dict__`` (a field added later cannot be
        forgotten); the list of checkpoints is then copied.
        """
        twin = Checkpoints.__new__(Checkpoints)
        twin.__dict__.update(self.__dict__)
        twin._items = [replace(c, snapshots=dict(c.snapshots)) for c in self._items]
        return twin
