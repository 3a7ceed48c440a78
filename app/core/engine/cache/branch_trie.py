"""Which cache a prompt should run on: a token trie of live branches, and its policy.

Agents send one long prefix (instructions and tools) again and again, subagents branch
off it, and a client edits or regenerates its last turn. Each live cache is a *branch*:
the token ids it was last filled with. `BranchTrie` is a radix trie over them (shared
prefixes stored once) that finds, for a new prompt, the branch sharing the longest
common prefix with it — whatever its history. `plan` turns that into what to do:

- ``continue`` the branch when the prompt extends it (the cache only grows), or
  diverges only in its last few tokens;
- ``fork`` it when the prompt diverges inside it: its first ``common`` tokens are
  copied into a new cache, so both branches stay live (a subagent does not destroy its
  parent's cache, nor the parent its subagent's);
- ``new`` when nothing worth copying is shared.

Branches are kept least recently used first, with their bytes: `evict` names those to
drop to get under a budget, never a protected one (the app's own conversations). Pure
policy: no MLX, caches are duck-typed (anything with ``nbytes``), and it is tested
without a model; the server's `ConversationIndex` uses it, the engine does the copy.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

# Copying fewer tokens than this is not worth a fork: the prefix cache or a prefill
# is as cheap.
MIN_FORK_TOKENS = 256

# A branch whose part beyond the shared prefix is this short is continued (cut back)
# rather than copied: its generation prompt re-tokenized with the reply after it, or a
# short last turn edited, costs less to recompute than a copy of the prefix.
SMALL_TAIL = 16

Action = Literal["continue", "fork", "new"]


class Sized(Protocol):
    """A cache as the trie sees it: its bytes."""

    @property
    def nbytes(self) -> int: ...


@dataclass
class _Node:
    edge: tuple[int, ...] = ()
    children: dict[int, _Node] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)  # branches through this node


@dataclass
class Branch:
    """One live cache.

    Attributes:
        key: Its cache key.
        tokens: The token ids it holds (its prompt).
        nbytes: Bytes it occupies.
        protected: Never evicted by `BranchTrie.evict` (the app's conversations).
        used: When it was last used (a counter; larger is more recent).
    """

    key: str
    tokens: tuple[int, ...]
    nbytes: int = 0
    protected: bool = False
    used: int = 0


@dataclass(frozen=True)
class Match:
    """The branch sharing the longest prefix with a prompt.

    Attributes:
        key: Its cache key.
        common: Tokens the prompt shares with it.
        length: Tokens the branch holds.
    """

    key: str
    common: int
    length: int


@dataclass(frozen=True)
class Plan:
    """What a prompt runs on.

    Attributes:
        action: ``continue`` (run on ``key``), ``fork`` (copy ``common`` tokens of
            ``key`` into a new cache) or ``new`` (an empty cache).
        key: The branch continued or forked ('' for ``new``).
        common: Tokens reused from it.
    """

    action: Action
    key: str = ""
    common: int = 0


class BranchTrie:
    """Live branches in a radix trie over their token ids; not thread-safe."""

    def __init__(self) -> None:
        self._root = _Node()
        self._branches: dict[str, Branch] = {}
        self._clock = itertools.count(1)

    def __len__(self) -> int:
        return len(self._branches)

    def __contains__(self, key: str) -> bool:
        return key in self._branches

    def branch(self, key: str) -> Branch | None:
        """The branch of ``key``, or None."""
        return self._branches.get(key)

    @property
    def total_bytes(self) -> int:
        """Bytes of every branch."""
        return sum(b.nbytes for b in self._branches.values())

    # -- changes ---------------------------------------------------------------------

    def insert(
        self,
        key: str,
        tokens: Sequence[int],
        nbytes: int = 0,
        *,
        protected: bool = False,
    ) -> None:
        """Record that ``key``'s cache now holds ``tokens`` (replacing what it held)."""
        self.remove(key)
        tokens = tuple(tokens)
        self._branches[key] = Branch(key, tokens, nbytes, protected, next(self._clock))
        node, pos = self._root, 0
        node.keys.add(key)
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                child = _Node(edge=tokens[pos:], keys={key})
                node.children[tokens[pos]] = child
                return
            shared = _shared(child.edge, tokens, pos)
            if shared < len(child.edge):  # split the edge where the tokens part
                middle = _Node(edge=child.edge[:shared], keys=set(child.keys))
                child.edge = child.edge[shared:]
                middle.children[child.edge[0]] = child
                node.children[tokens[pos]] = middle
                child = middle
            child.keys.add(key)
            node, pos = child, pos + shared

    def update(self, key: str, cache: Sized) -> None:
        """Take ``key``'s bytes from its cache."""
        branch = self._branches.get(key)
        if branch is not None:
            branch.nbytes = cache.nbytes

    def touch(self, key: str) -> None:
        """Mark ``key`` as just used."""
        branch = self._branches.get(key)
        if branch is not None:
            branch.used = next(self._clock)

    def remove(self, key: str) -> None:
        """Forget ``key``'s branch (its cache was dropped)."""
        branch = self._branches.pop(key, None)
        if branch is None:
            return
        node, pos, tokens = self._root, 0, branch.tokens
        node.keys.discard(key)
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                return
            child.keys.discard(key)
            if not child.keys:
                del node.children[tokens[pos]]
                return
            node, pos = child, pos + len(child.edge)

    # -- questions -------------------------------------------------------------------

    def longest(
        self, tokens: Sequence[int], exclude: Iterable[str] = ()
    ) -> Match | None:
        """The branch sharing the longest prefix with ``tokens`` (the most recently
        used of equals), ``exclude``'s keys left out; None when there is no branch."""
        excluded = set(exclude)
        # (depth, node) pairs down the path; a partial edge ends the walk.
        path: list[tuple[int, _Node]] = [(0, self._root)]
        node, pos = self._root, 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            shared = _shared(child.edge, tokens, pos)
            path.append((pos + shared, child))
            if shared < len(child.edge):
                break
            node, pos = child, pos + shared
        for depth, at in reversed(path):
            candidates = [self._branches[k] for k in at.keys if k not in excluded]
            if candidates:
                best = max(candidates, key=lambda b: b.used)
                return Match(best.key, depth, len(best.tokens))
        return None

    def plan(
        self,
        tokens: Sequence[int],
        busy: Iterable[str] = (),
        min_fork: int = MIN_FORK_TOKENS,
    ) -> Plan:
        """What a prompt of ``tokens`` should run on (busy caches left out)."""
        match = self.longest(tokens, busy)
        if match is None or match.common == 0:
            return Plan("new")
        if match.length - match.common <= SMALL_TAIL:
            return Plan("continue", match.key, match.common)
        if match.common >= min_fork:
            return Plan("fork", match.key, match.common)
        return Plan("new")

    def evict(self, budget_bytes: int, keep: Iterable[str] = ()) -> list[str]:
        """Branches to drop, least recently used first, until the unprotected and
        protected together fit ``budget_bytes`` (protected ones, and ``keep``'s — the
        branch just used, busy ones — are never named).

        The branches named are removed from the trie.
        """
        kept = set(keep)
        dropped = []
        total = self.total_bytes
        for branch in sorted(self._branches.values(), key=lambda b: b.used):
            if total <= budget_bytes:
                break
            if branch.protected or branch.key in kept:
                continue
            total -= branch.nbytes
            dropped.append(branch.key)
        for key in dropped:
            self.remove(key)
        return dropped


def _shared(edge: tuple[int, ...], tokens: Sequence[int], pos: int) -> int:
    """How many leading tokens of ``edge`` equal ``tokens[pos:]``."""
    limit = min(len(edge), len(tokens) - pos)
    count = 0
    while count < limit and edge[count] == tokens[pos + count]:
        count += 1
    return count
