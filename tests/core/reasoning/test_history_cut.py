"""The cut that makes a cache a prefix of the rendered history."""

from __future__ import annotations

from app.core.reasoning.history import Cut, reasoning_cut


def test_the_reasoning_span_is_cut_and_the_answer_kept():
    # prompt 1 2 3 | <think>=9 r r </think>=8 | answer 5 6 | eos 7
    cached = [1, 2, 3, 9, 40, 41, 8, 5, 6, 7]
    rendered = [1, 2, 3, 5, 6, 7, 0, 11]  # the template drops the reasoning
    assert reasoning_cut(cached, rendered) == Cut(start=3, stop=7, kept=6)


def test_a_template_that_keeps_reasoning_cuts_nothing():
    cached = [1, 2, 3, 9, 40, 8, 5]
    assert reasoning_cut(cached, cached + [7, 0]) == Cut(7, 7, 7)


def test_a_reply_that_retokenizes_differently_keeps_what_matches():
    cached = [1, 2, 9, 40, 8, 5, 6, 7]
    rendered = [1, 2, 5, 66, 7]  # "6" re-tokenized as "66"
    cut = reasoning_cut(cached, rendered)
    assert cut == Cut(start=2, stop=5, kept=3)


def test_nothing_after_the_cut_matches():
    assert reasoning_cut([1, 2, 9, 8], [1, 2, 5]) is None
