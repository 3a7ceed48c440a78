"""Extractive summaries are deterministic and bounded by the token budget."""

from __future__ import annotations

import pytest

from app.core.cancel import CancelToken
from app.core.trim.degenerate import degenerate_reason
from app.core.trim.extractive import (
    HEADER,
    TrimCancelled,
    extractive_summary,
    first_sentence,
)


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
    assert "- User: Hi." in a.splitlines()[1]
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


class CountingTokenizer:
    """Counts words, and how often and on how many characters it was called."""

    def __init__(self):
        self.calls = 0
        self.chars = 0

    def __call__(self, text):
        self.calls += 1
        self.chars += len(text)
        return len(text.split())


def _long_history(count):
    return [
        (
            "user" if i % 2 == 0 else "assistant",
            f"Some words about topic {i} of the long talk. And then more plain words.",
        )
        for i in range(count)
    ]


def test_tokenizer_work_does_not_grow_with_the_number_of_dropped_messages():
    work = {}
    for count in (2_000, 20_000):
        tokenizer = CountingTokenizer()
        text = extractive_summary(_long_history(count), 256, tokenizer)
        assert tokenizer(text) <= 256
        assert f"topic {count - 1} " in text  # the newest survive
        work[count] = (tokenizer.calls - 1, tokenizer.chars - len(text))
    # Each line is counted at most once and counting stops once the budget is full:
    # ten times the messages costs the same tokenizer work (quadratic was 100x).
    calls_2k, chars_2k = work[2_000]
    calls_20k, chars_20k = work[20_000]
    assert calls_20k <= calls_2k + 2
    assert chars_20k <= chars_2k * 1.2
    assert calls_2k < 200


def test_a_cancelled_trim_stops_before_counting_anything():
    token = CancelToken()
    token.cancel()
    tokenizer = CountingTokenizer()
    with pytest.raises(TrimCancelled):
        extractive_summary(_long_history(20_000), 256, tokenizer, cancel=token)
    assert tokenizer.calls == 0


def test_a_cancel_midway_stops_within_a_few_messages():
    class CancelledAfterChecks(CancelToken):
        """Reports a cancel from its sixth check on."""

        checks = 0

        @property
        def cancelled(self):
            self.checks += 1
            return self.checks > 5

    token = CancelledAfterChecks()
    tokenizer = CountingTokenizer()
    with pytest.raises(TrimCancelled):
        extractive_summary(_long_history(20_000), 256, tokenizer, cancel=token)
    # Checked every 64 messages: it stopped after about 6 x 64 of them.
    assert token.checks == 6 and tokenizer.calls == 0


def test_sentences_with_facts_win_over_first_sentences():
    messages = [
        ("user", "Hello there. My locker number is 4417. Thanks."),
        ("assistant", "Noted. I will keep that in mind."),
        *[("user", f"Filler without facts, part {'x' * 3}. More filler.")] * 20,
    ]
    text = extractive_summary(messages, 30, words)
    assert "My locker number is 4417." in text
    assert "Hello there" not in text


def test_an_updated_fact_leaves_the_value_it_replaced_out():
    messages = [
        ("user", "My flight number is 12. I fly on Monday."),
        ("assistant", "Ok, your flight number is 12."),
        ("user", "Sorry, my flight number is 78 now."),
    ]
    text = extractive_summary(messages, 60, words)
    assert "is 78" in text and "is 12" not in text
    assert "I fly on Monday." in text  # the rest of that message still counts


def test_an_earlier_summary_line_is_superseded_by_a_newer_message():
    earlier = extractive_summary([("user", "My cat's name is Juniper.")], 60, words)
    assert "Juniper" in earlier
    text = extractive_summary(
        [("user", "Actually, it's Willow."), ("assistant", "Willow it is.")],
        60,
        words,
        previous_summary=earlier,
    )
    assert "Juniper" not in text and "Willow" in text


def test_quoted_strings_and_names_count_as_facts():
    messages = [
        ("assistant", 'Fine. The file is called "ledger.csv" on the drive.'),
        ("assistant", "Plain words. Then Marguerite called about it."),
        *[("assistant", "nothing here to keep at all")] * 10,
    ]
    text = extractive_summary(messages, 40, words)
    assert '"ledger.csv"' in text
    assert "Marguerite" in text


def test_earlier_summary_lines_with_facts_survive_the_next_trim():
    first = extractive_summary(
        [("user", "My cat's name is Pebble and she is 7.")], 60, words
    )
    second = extractive_summary(
        [("user", "nothing much"), ("assistant", "indeed nothing")],
        60,
        words,
        previous_summary=first,
    )
    assert "Pebble" in second and second.count(HEADER) == 1


def test_degenerate_model_summaries_are_recognised():
    source = ["My pass key is 55321.", "Noted: your pass key is 55321."]
    assert degenerate_reason("1" * 40, source) == "it repeats one character"
    assert "repeats" in degenerate_reason("key key key key key key key key key", source)
    assert "no word" in degenerate_reason("Bananas grow in tropical places.", source)
    assert degenerate_reason("", source) == "it was empty"
    assert degenerate_reason("The user's pass key is 55321.", source) == ""
