"""Which engine cache a client request runs on: the conversation it continues, if any.

The engine reuses a cache by token prefix whatever key it is under, so the choice
matters only for what it keeps: sending a new conversation onto another's cache would
cut that one back to their common prefix (often just the system prompt) and make both
re-prefill in turn. So a request takes the cache of the conversation it continues —
one whose last request's messages it starts with, or with which it shares at least
one message after the system prompt (an edited or regenerated last turn) — and any
other request gets a cache of its own (a shared system prompt still comes from the
engine's prefix cache). A cache serves one request at a time: a request that would
continue a busy one (the same history sent twice at once) gets its own.

When the request's prompt tokens are known, the choice is by tokens instead, through a
`BranchTrie` of the caches' prompts: the request runs on the cache sharing the longest
token prefix with it, and when it diverges inside that cache (a subagent off the same
instructions and tools, a tool list changed near its end, an edited turn) the lease
says to fork: the shared prefix is copied into a cache of its own, and both branches
stay live until the engine's LRU, within the memory budget, drops one.

Branches are bounded by their KV bytes, not only by their count: after every request
the branches are held to ``budget_bytes()`` (the memory budget's KV room less what
the app's own conversations hold), least recently used first out, and the caches of
those evicted are dropped from the engine. The branch that just ran and busy ones are
never evicted, so the hot branch survives however many others come and go.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from app.core.engine.cache.branch_trie import BranchTrie

# Conversations remembered; their caches themselves live in the engine's LRU.
MAX_CONVERSATIONS = 256
KEY_PREFIX = "server-"
# Shared by every index of the process: a server started again on the same engine
# must not land on caches an earlier one left there (a new conversation would find a
# stranger's cache instead of an empty one that the prefix cache can fill).
_KEY_NUMBERS = itertools.count(1)
# Keys appear in the server's log and its responses: one run's "server-3" must not be
# taken for another run's, so each process adds a token of its own.
_RUN = secrets.token_hex(3)


@dataclass
class _Conversation:
    key: str
    hashes: tuple[str, ...] = ()
    busy: bool = False
    used_at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Lease:
    """A cache key held by one request until `ConversationIndex.release`.

    Attributes:
        key: The engine cache key.
        continued: True when the request continues the conversation of that cache.
        shared_messages: Leading client messages it shares with that conversation.
        fork_from: A cache whose first ``fork_tokens`` tokens should be copied into
            ``key``'s before the request runs ('' for none).
        fork_tokens: How many.
    """

    key: str
    continued: bool
    shared_messages: int
    fork_from: str = ""
    fork_tokens: int = 0


def shared_prefix(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many leading messages two prefix-hash chains share."""
    # Hashes are of whole prefixes: equal at i means equal everywhere before i.
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[middle - 1] == b[middle - 1]:
            low = middle
        else:
            high = middle - 1
    return low


class ConversationIndex:
    """Client conversations and the engine cache keys they run on; thread-safe.

    Args:
        cached_tokens: Tokens the engine's cache of a key holds (0: none, e.g. it was
            dropped by the LRU or under memory pressure); for the status only.
        capacity: Conversations remembered.
        budget_bytes: KV bytes the branches may hold together (None: no bound).
        drop: Drops a key's engine cache (an evicted branch).

    Attributes:
        budget_bytes: As given (replaceable, e.g. by a test).
        evicted: Keys evicted for bytes so far, oldest first (the last 64).
    """

    def __init__(
        self,
        cached_tokens: Callable[[str], int],
        capacity: int = MAX_CONVERSATIONS,
        *,
        budget_bytes: Callable[[], int | None] = lambda: None,
        drop: Callable[[str], None] = lambda key: None,
    ):
        self._cached_tokens = cached_tokens
        self.budget_bytes = budget_bytes
        self._drop = drop
        self.evicted: list[str] = []
        self.capacity = capacity
        self._conversations: dict[str, _Conversation] = {}
        self._lock = threading.Lock()
        self.branches = BranchTrie()

    def acquire(
        self,
        hashes: tuple[str, ...],
        system_count: int,
        tokens: Sequence[int] | None = None,
    ) -> Lease:
        """Choose the cache key for a request and mark it busy.

        Args:
            hashes: The request's `prefix_hashes`.
            system_count: Its leading system messages.
            tokens: Its prompt's token ids; when given, the cache is chosen by the
                longest token prefix (`BranchTrie`).
        """
        if tokens is not None:
            return self._acquire_by_tokens(hashes, tokens)
        with self._lock:
            best, best_shared = None, 0
            for conversation in self._conversations.values():
                if conversation.busy or not conversation.hashes:
                    continue
                shared = shared_prefix(conversation.hashes, hashes)
                continues = shared == len(conversation.hashes) or shared > system_count
                if not continues:
                    continue
                if shared > best_shared or (
                    shared == best_shared
                    and best is not None
                    and conversation.used_at > best.used_at
                ):
                    best, best_shared = conversation, shared
            if best is None:
                best = _Conversation(key=f"{KEY_PREFIX}{_RUN}-{next(_KEY_NUMBERS)}")
                self._conversations[best.key] = best
                self._forget_oldest()
                continued = False
            else:
                continued = True
            best.busy = True
            best.used_at = time.monotonic()
            return Lease(best.key, continued, best_shared)

    def _acquire_by_tokens(
        self, hashes: tuple[str, ...], tokens: Sequence[int]
    ) -> Lease:
        # Branches whose cache the engine dropped (LRU, memory pressure) are gone.
        for key in self.keys():
            if key in self.branches and not self._cached_tokens(key):
                with self._lock:
                    self.branches.remove(key)
        with self._lock:
            busy = [k for k, c in self._conversations.items() if c.busy]
            plan = self.branches.plan(tokens, busy)
            known = self._conversations.get(plan.key)
            if plan.action == "continue" and known is not None:
                conversation = known
            else:
                conversation = _Conversation(key=f"{KEY_PREFIX}{next(_KEY_NUMBERS)}")
                self._conversations[conversation.key] = conversation
                self._forget_oldest()
            conversation.busy = True
            conversation.used_at = time.monotonic()
            self.branches.touch(conversation.key)
            return Lease(
                conversation.key,
                continued=plan.action == "continue",
                shared_messages=shared_prefix(conversation.hashes, hashes),
                fork_from=plan.key if plan.action == "fork" else "",
                fork_tokens=plan.common if plan.action == "fork" else 0,
            )

    def release(
        self,
        lease: Lease,
        hashes: tuple[str, ...] | None,
        tokens: Sequence[int] | None = None,
        nbytes: int = 0,
    ) -> None:
        """Free a key; ``hashes`` is what its cache now continues (None: unchanged),
        ``tokens`` the prompt it now holds (for the branch trie) and ``nbytes`` its
        size; then the branches are held to the byte budget (`evict_to_budget`)."""
        with self._lock:
            conversation = self._conversations.get(lease.key)
            if conversation is None:
                return
            conversation.busy = False
            conversation.used_at = time.monotonic()
            if hashes is not None:
                conversation.hashes = hashes
            if tokens is not None:
                self.branches.insert(lease.key, tokens, nbytes)
        self.evict_to_budget(keep=lease.key)

    def evict_to_budget(self, keep: str = "") -> list[str]:
        """Drop least recently used branches until they fit ``budget_bytes()``.

        Args:
            keep: A key never evicted (the branch that just ran); busy ones are not
                either.

        Returns:
            The keys evicted (their engine caches dropped, their conversations
            forgotten).
        """
        budget = self.budget_bytes()
        if budget is None:
            return []
        with self._lock:
            busy = [k for k, c in self._conversations.items() if c.busy]
            evicted = self.branches.evict(budget, keep=[keep, *busy])
            for key in evicted:
                self._conversations.pop(key, None)
            self.evicted = (self.evicted + evicted)[-64:]
        for key in evicted:  # outside the lock: it waits for the engine thread
            self._drop(key)
        return evicted

    def branch_bytes(self) -> int:
        """KV bytes the branches held when last released."""
        with self._lock:
            return self.branches.total_bytes

    def keys(self) -> list[str]:
        """Every key the server has used (live caches or not)."""
        with self._lock:
            return list(self._conversations)

    def live_conversations(self) -> int:
        """Conversations whose cache the engine still holds."""
        return sum(1 for key in self.keys() if self._cached_tokens(key))

    def forget_idle(self) -> list[str]:
        """Forget every conversation not serving a request; return their keys."""
        with self._lock:
            idle = [k for k, c in self._conversations.items() if not c.busy]
            for key in idle:
                del self._conversations[key]
                self.branches.remove(key)
            return idle

    def _forget_oldest(self) -> None:
        while len(self._conversations) > self.capacity:
            idle = [c for c in self._conversations.values() if not c.busy]
            if not idle:
                return
            oldest = min(idle, key=lambda c: c.used_at)
            del self._conversations[oldest.key]
            self.branches.remove(oldest.key)
