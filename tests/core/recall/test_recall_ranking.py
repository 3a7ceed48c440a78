"""Recall's ranking: the weighted BM25 score orders pairs; exact ties go to the
more important, then the newer."""

from __future__ import annotations

from app.core.recall.in_memory import Original
from app.core.recall.ranking import (
    IMPORTANCE_WEIGHT,
    coverage,
    pair_importance,
    ranked,
)

PLAIN = (
    Original(1, "user", "We talked about the harbor at length."),
    Original(2, "assistant", "The harbor was busy."),
)
FACT = (
    Original(3, "user", "My harbor permit number is 4417."),
    Original(4, "assistant", "Noted: permit 4417."),
)


def test_a_better_match_outranks_a_more_important_pair_scored_close_behind():
    points = pair_importance(FACT)
    assert points > pair_importance(PLAIN) == 0
    # The fact's weighted score is 90 % of the plain pair's: close behind, not equal.
    relevance = 0.9 / (1 + IMPORTANCE_WEIGHT * points)
    assert ranked([(FACT, relevance), (PLAIN, 1.0)]) == [PLAIN, FACT]
    assert ranked([(FACT, 1.0), (PLAIN, 1.0)]) == [FACT, PLAIN]


def test_at_an_equal_score_the_newer_pair_wins():
    older = (Original(1, "user", "the harbor"), Original(2, "assistant", "yes"))
    newer = (Original(5, "user", "the harbor"), Original(6, "assistant", "yes"))
    assert ranked([(older, 1.0), (newer, 1.0)]) == [newer, older]
    assert ranked([]) == []


def test_coverage_counts_the_query_words_the_whole_pair_holds():
    pair = (
        Original(1, "user", "Where did you go camping?"),
        Original(2, "assistant", "We camped by the Lake, roasting marshmallows."),
    )
    assert coverage(pair, ["camping", "lake", "marshmallow"]) == 1.0
    # Exact below four letters: "art" is not "artist"; a stem's prefix above.
    assert coverage(pair, ["lake", "art", "roasted", "hiking"]) == 0.5
    assert coverage((Original(3, "user", "Café crème"),), ["cafe", "creme"]) == 1.0
    assert coverage(pair, []) == 0.0


def test_a_pair_holding_more_of_the_query_words_outranks_a_stronger_single_match():
    both = (
        Original(1, "user", "Which book did you read?"),
        Original(2, "assistant", "Melanie recommended it: a novel about camping."),
    )
    one = (
        Original(3, "user", "Camping, camping, camping."),
        Original(4, "assistant", "Yes."),
    )
    terms = ["book", "melanie", "camping"]
    # BM25 alone prefers the message that repeats one word.
    assert ranked([(one, 1.5), (both, 1.0)]) == [one, both]
    assert ranked([(one, 1.5), (both, 1.0)], terms) == [both, one]
