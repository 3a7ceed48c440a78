"""Recall's query: any content word may match, and nothing typed is FTS5 syntax."""

from __future__ import annotations

from app.core.recall.query import MAX_TERMS, recall_query, recall_terms
from app.core.store.search import prefix_stem


def test_stopwords_go_and_the_rest_is_or_ed():
    assert recall_query("What is my locker number?") == '"locker"* OR "number"*'


def test_words_of_four_letters_or_more_are_prefixes_and_shorter_ones_exact():
    assert (
        recall_query("the LGBTQ groups, go on, art")
        == '"lgbtq"* OR "group"* OR "go" OR "art"'
    )


def test_a_long_word_is_the_prefix_of_its_stem():
    assert recall_query("camping hiking running movies") == (
        '"camp"* OR "hik"* OR "run"* OR "movi"*'
    )
    assert prefix_stem("camped") == prefix_stem("camping") == "camp"
    assert prefix_stem("write") == prefix_stem("writes") == "writ"


def test_a_stem_is_never_shorter_than_three_letters_nor_cut_from_a_short_word():
    assert prefix_stem("class") == "class"  # "-ss" is no plural
    assert prefix_stem("hike") == "hike"  # a final "e" stays below five letters
    assert prefix_stem("uses") == "use"
    assert prefix_stem("go") == prefix_stem("art") == ""  # exact words
    assert prefix_stem("2023") == "2023"  # digits are not stemmed
    assert recall_query("art 2023") == '"art" OR "2023"*'


def test_a_question_without_content_words_gives_no_query():
    assert recall_query("What is it? Do you?") == ""
    assert recall_query("?? -- ::") == ""


def test_operators_and_quotes_are_plain_words():
    query = recall_query('NEAR(a b) "quoted" OR title:x AND -minus *star')
    assert query == (
        '"near"* OR "b" OR "quot"* OR "titl"* OR "x" OR "minu"* OR "star"*'
    )


def test_terms_are_distinct_lowercase_and_bounded():
    text = " ".join(f"Word{i} word{i}" for i in range(100))
    terms = recall_terms(text)
    assert len(terms) == MAX_TERMS == len(set(terms))
    assert terms[0] == "word0"
