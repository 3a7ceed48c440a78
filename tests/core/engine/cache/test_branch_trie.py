"""The branch trie's policy, with duck-typed caches (no model needed)."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.engine.cache.branch_trie import BranchTrie, Match, Plan

PREFIX = list(range(1000, 1600))  # instructions and tools: 600 tokens


@dataclass
class FakeCache:
    nbytes: int


def test_a_conversation_continues_its_own_branch():
    trie = BranchTrie()
    trie.insert("a", PREFIX + [1, 2, 3])
    assert trie.plan(PREFIX + [1, 2, 3, 4, 5]) == Plan("continue", "a", 603)


def test_subagents_fork_the_shared_prefix_and_both_stay_live():
    trie = BranchTrie()
    main = PREFIX + [1, 2, 3] * 20
    trie.insert("main", main)
    plan = trie.plan(PREFIX + [7, 8])
    assert plan == Plan("fork", "main", 600)
    trie.insert("sub", PREFIX + [7, 8] * 20)
    # Each continues its own branch afterwards.
    assert trie.plan(main + [9]).key == "main"
    assert trie.plan(PREFIX + [7, 8] * 20 + [9]).key == "sub"
    assert len(trie) == 2


def test_a_changed_tool_at_the_end_costs_only_the_tail():
    trie = BranchTrie()
    tools = PREFIX[:-10]
    history = list(range(50))
    trie.insert("a", PREFIX + history)
    plan = trie.plan(tools + [5] * 10 + history)
    assert plan == Plan("fork", "a", 590)


def test_a_branch_differing_only_in_its_last_tokens_is_continued():
    """The previous prompt's generation header re-tokenizes with the reply after it."""
    trie = BranchTrie()
    trie.insert("a", PREFIX + [1, 2, 3])
    assert trie.plan(PREFIX + [1, 2, 4, 5, 6]) == Plan("continue", "a", 602)


def test_the_longest_of_several_branches_wins_and_recency_breaks_ties():
    trie = BranchTrie()
    trie.insert("short", PREFIX[:300])
    trie.insert("long", PREFIX + [1, 2, 3, 4])
    trie.insert("other", PREFIX[:400] + [9])
    assert trie.longest(PREFIX + [1, 2, 3, 4, 5]) == Match("long", 604, 604)
    assert trie.longest(PREFIX[:400] + [9, 9]) == Match("other", 401, 401)
    trie.insert("twin", PREFIX + [8])
    trie.insert("twin2", PREFIX + [7])
    # Both share 600 tokens with the prompt: the most recently used one is chosen.
    assert trie.longest(PREFIX + [6]).key == "twin2"
    trie.touch("twin")
    assert trie.longest(PREFIX + [6]).key == "twin"


def test_busy_branches_are_left_out():
    trie = BranchTrie()
    trie.insert("a", PREFIX + [1])
    trie.insert("b", PREFIX[:500])
    assert trie.plan(PREFIX + [1, 2], busy=["a"]) == Plan("continue", "b", 500)
    assert trie.plan(PREFIX + [1, 2], busy=["a", "b"]) == Plan("new")


def test_little_shared_is_a_new_cache_and_a_retry_of_the_same_prompt_continues():
    trie = BranchTrie()
    trie.insert("a", [1, 2, 3, 4, 5] * 10)
    assert trie.plan([1, 2, 9]) == Plan("new")
    assert trie.plan([7]) == Plan("new")
    assert trie.plan([1, 2, 3, 4, 5] * 10) == Plan("continue", "a", 50)


def test_remove_and_replace_keep_the_trie_consistent():
    trie = BranchTrie()
    trie.insert("a", PREFIX + [1])
    trie.insert("b", PREFIX + [2])
    trie.remove("a")
    assert trie.longest(PREFIX + [1]) == Match("b", 600, 601)
    trie.insert("b", [5, 6])  # its cache was refilled with something else
    assert trie.longest(PREFIX + [1]) is None or trie.longest(PREFIX + [1]).common == 0
    assert trie.plan([5, 6, 7]) == Plan("continue", "b", 2)
    trie.remove("b")
    assert len(trie) == 0 and trie.longest([5, 6]) is None


def test_eviction_is_least_recently_used_first_and_spares_protected_branches():
    trie = BranchTrie()
    trie.insert("app", [1] * 10, 500, protected=True)
    trie.insert("old", [2] * 10, 300)
    trie.insert("mid", [3] * 10, 300)
    trie.insert("new", [4] * 10)
    trie.update("new", FakeCache(nbytes=300))
    trie.touch("old")  # now the most recent of the unprotected
    assert trie.total_bytes == 1400
    assert trie.evict(budget_bytes=900) == ["mid", "new"]
    assert "old" in trie and "app" in trie and trie.total_bytes == 800
    assert trie.evict(budget_bytes=0) == ["old"]
    assert "app" in trie  # the app's conversation keeps its protection
