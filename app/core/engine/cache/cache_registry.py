"""The engine's conversation caches: a small LRU, and what each one holds, published.

Each conversation (or long-document run, or server client) keeps its own KV cache
across turns, keyed by a string; a few idle ones stay besides the active one and the
oldest is dropped first (its conversation re-prefills on its next turn). After every
change the engine thread publishes the cache's size as a frozen `CacheState`, so other
threads (the context meter, the memory gauge) read it without waiting for the engine.
Caches are touched only on the engine thread.

Keys belong to owners by their prefix (``conversation-12``: the app and the CLI;
``server-3``: a client of the local server). When a cache must go, the oldest idle one
*of the owner that needs the room* goes first, and another owner's only when it has
none: a busy API client re-prefills its own old conversations rather than the app's.
"""

from __future__ import annotations

from collections import OrderedDict

from app.core.engine.cache.conversation_cache import ConversationCache
from app.core.engine.turn_handle import CacheState
from app.core.presets.generation_settings import KVSettings

EMPTY = CacheState(tokens=0, kv_bytes=0, kv_bits=16)


def cache_owner(key: str) -> str:
    """Who a cache key belongs to: its prefix before the first ``-`` (or the key)."""
    return key.split("-", 1)[0]


class CacheRegistry:
    """The live conversation caches, least recently used first.

    Args:
        max_idle: Caches kept besides the one in use.
    """

    def __init__(self, max_idle: int = 2):
        self.max_idle = max_idle
        self._caches: OrderedDict[str, ConversationCache] = OrderedDict()
        self._states: dict[str, CacheState] = {}

    def get(self, key: str) -> ConversationCache | None:
        """The cache of ``key``, or None."""
        return self._caches.get(key)

    def for_turn(self, key: str, model, kv: KVSettings) -> ConversationCache:
        """The cache a turn of ``key`` runs on, made the most recent (engine thread).

        A cache at another KV precision cannot be continued and is replaced by an empty
        one (the conversation re-prefills); beyond ``max_idle`` idle caches, the oldest
        is dropped (the oldest of ``key``'s owner first, see `drop_oldest_idle`).
        """
        cache = self._caches.get(key)
        if cache is not None and not cache.matches_precision(kv):
            cache = None
        if cache is None:
            cache = ConversationCache(model, kv)
        cache.kv = kv
        self._caches[key] = cache
        self._caches.move_to_end(key)
        while len(self._caches) > self.max_idle + 1:
            self.drop_oldest_idle(keep=key)
        return cache

    def publish(self, key: str) -> None:
        """Record what ``key``'s cache holds now (engine thread, after a change)."""
        cache = self._caches.get(key)
        if cache is None:
            self._states.pop(key, None)
            return
        self._states[key] = CacheState(
            tokens=cache.offset,
            kv_bytes=cache.nbytes,
            kv_bits=cache.bits_in_use,
            next_position=cache.next_position,
            kv_layers=cache.layer_groups(),
            checkpoint_bytes=cache.checkpoint_nbytes,
        )

    def state(self, key: str) -> CacheState:
        """What ``key``'s cache held when last published (any thread)."""
        return self._states.get(key) or EMPTY

    def forget(self, key: str) -> ConversationCache | None:
        """Drop ``key``'s cache; return it."""
        self._states.pop(key, None)
        return self._caches.pop(key, None)

    def drop_oldest_idle(self, keep: str) -> ConversationCache | None:
        """Drop the least recently used cache other than ``keep`` and return it.

        The oldest idle cache of ``keep``'s own owner goes first; another owner's
        only when that owner has no other cache.

        Returns None when ``keep`` is the only cache (nothing idle is left to drop).
        """
        idle = [key for key in self._caches if key != keep]
        if not idle:
            return None
        owner = cache_owner(keep)
        own = [key for key in idle if cache_owner(key) == owner]
        return self.forget((own or idle)[0])

    def drop_idle(self) -> int:
        """Drop every cache but the most recent one; return the bytes they held."""
        freed = 0
        while len(self._caches) > 1:
            cache = self.forget(next(iter(self._caches)))
            assert cache is not None, "the key came from the registry itself"
            freed += cache.resident_bytes
        return freed

    def clear(self) -> None:
        """Drop every cache (a new model was loaded)."""
        self._caches.clear()
        self._states.clear()

    def total_bytes(self) -> int:
        """Bytes every cache holds, state checkpoints included (approximate from other
        threads): what the memory budget counts."""
        return sum(cache.resident_bytes for cache in list(self._caches.values()))
