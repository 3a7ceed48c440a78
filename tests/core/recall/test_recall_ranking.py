"""Recall's ranking: the weighted BM25 score orders pairs; exact ties go to the
more important, then the newer."""

from __future__ import annotations

from app.core.recall.in_memory import Original
from app.core.recall.ranking import IMPORTANCE_WEIGHT, pair_importance, ranked

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
