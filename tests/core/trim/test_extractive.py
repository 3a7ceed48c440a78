"""Extractive summaries are deterministic and bounded by the token budget."""

from __future__ import annotations

from app.core.trim.extractive import HEADER, extractive_summary, first_sentence


def words(text):
    return len(text.split())


def test_first_sentence_folds_whitespace_and_cuts_long_text():
    assert first_sentence("Hello   there.\nSecond one.") == "Hello there."
    long = "word " * 200
    assert len(first_sentence(long)) <= 241


def test_summary_fits_the_budget_and_prefers_recent_messages():
    messages = [
        ("user", f"Question number {i} about topic {i}. More.") for i in range(30)
    ]
    text = extractive_summary(messages, max_tokens=40, count_tokens=words)
    assert words(text) <= 40
    assert text.startswith(HEADER)
    assert "number 29" in text and "number 0 " not in text


def test_summary_is_deterministic_and_folds_the_previous_one():
    messages = [("user", "Where is Paris?"), ("assistant", "In France. It is big.")]
    a = extractive_summary(
        messages, 100, words, previous_summary=f"{HEADER}\n- User: Hi."
    )
    b = extractive_summary(
        messages, 100, words, previous_summary=f"{HEADER}\n- User: Hi."
    )
    assert a == b
    assert "- Before that: - User: Hi." in a
    assert "- Assistant: In France." in a


def test_a_budget_smaller_than_any_sentence_still_gives_content():
    long_sentence = " ".join(f"word{i}" for i in range(80)) + "."
    text = extractive_summary([("user", long_sentence)], 20, words)
    body = text.removeprefix(HEADER).strip()
    assert words(text) <= 20
    assert body.startswith("- User: word0 word1") and body.endswith("…")


def test_messages_without_text_are_counted_not_dropped():
    text = extractive_summary([("user", "   "), ("assistant", "\n")], 50, words)
    assert text == f"{HEADER}\n- 2 earlier messages without any text."
