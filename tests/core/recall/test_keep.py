"""Keeping the pairs later replies used most (issue #27, point 3's lexical proxy)."""

from __future__ import annotations

from app.core.recall.keep import keep_most_used, pairs_with_scores, reuse_scores


def _messages(texts: list[tuple[str, str]], tokens: int = 10):
    return [(i, role, text, tokens) for i, (role, text) in enumerate(texts)]


HISTORY = [
    ("user", "My telescope is a Dobsonian with a brass focuser."),
    ("assistant", "A Dobsonian telescope is a fine start."),
    ("user", "The weather was grey all week."),
    ("assistant", "Grey weeks happen in autumn."),
    ("user", "What eyepiece suits it?"),
    ("assistant", "For your Dobsonian, a 25 mm eyepiece suits the brass focuser."),
    ("user", "Thanks, and lunch was soup."),
    ("assistant", "Soup sounds warm."),
]


def test_a_pair_scores_what_later_replies_echo_not_its_own_reply():
    groups = [HISTORY[i : i + 2] for i in range(0, len(HISTORY), 2)]
    scores = reuse_scores(groups)
    # The telescope pair's words come back in a later reply; the weather pair's do not.
    assert scores[0] > 0
    assert scores[1] == 0
    # The last pair has no later reply at all, however much its own reply repeats it.
    assert scores[3] == 0
    assert reuse_scores([[("user", "tea tea"), ("assistant", "tea")]]) == [0.0]


def test_the_newest_pair_is_kept_then_the_most_used_within_the_budget():
    pairs = pairs_with_scores(_messages(HISTORY))
    assert [p.keys for p in pairs] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    # Room for two pairs: the newest, then the telescope pair (the weather and
    # eyepiece pairs are echoed less or not at all).
    assert keep_most_used(pairs, 40) == [0, 1, 6, 7]
    # Room for one: only the newest.
    assert keep_most_used(pairs, 25) == [6, 7]
    # A pair no later reply echoes is not kept even when it fits.
    assert 2 not in keep_most_used(pairs, 1000)
    assert keep_most_used([], 100) == []


def test_a_lone_message_is_a_pair_of_one():
    pairs = pairs_with_scores(
        _messages([("assistant", "Hello."), ("user", "Hi."), ("assistant", "Yes.")])
    )
    assert [p.keys for p in pairs] == [(0,), (1, 2)]
