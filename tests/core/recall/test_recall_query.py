"""Recall's query: any content word may match, and nothing typed is FTS5 syntax."""

from __future__ import annotations

from app.core.recall.query import MAX_TERMS, recall_query, recall_terms


def test_stopwords_go_and_the_rest_is_or_ed():
    assert recall_query("What is my locker number?") == '"locker"* OR "number"*'


def test_words_of_four_letters_or_more_are_prefixes_and_shorter_ones_exact():
    assert (
        recall_query("the LGBTQ group, go on, art")
        == '"lgbtq"* OR "group"* OR "go" OR "art"'
    )


def test_a_question_without_content_words_gives_no_query():
    assert recall_query("What is it? Do you?") == ""
    assert recall_query("?? -- ::") == ""


def test_operators_and_quotes_are_plain_words():
    query = recall_query('NEAR(a b) "quoted" OR title:x AND -minus *star')
    assert query == (
        '"near"* OR "b" OR "quoted"* OR "title"* OR "x" OR "minus"* OR "star"*'
    )


def test_terms_are_distinct_lowercase_and_bounded():
    text = " ".join(f"Word{i} word{i}" for i in range(100))
    terms = recall_terms(text)
    assert len(terms) == MAX_TERMS == len(set(terms))
    assert terms[0] == "word0"
