"""The segmenter: bounded, lossless, deterministic, and cutting at the coarsest boundary.

Property tests over seeded random texts (paragraphs, sentences, hard-wrapped lines, CJK,
words longer than a segment), with three counters: words (additive), characters (forces
cuts inside words) and the tiny model's real BPE tokenizer (not additive across joins,
which is what the segmenter's re-counting is for).
"""

from __future__ import annotations

import random
import re

import pytest

from app.core.longdoc.segmenter import (
    split_segments,
    stream_segments,
    truncate_to_tokens,
)

WORDS = [
    "the",
    "a",
    "river",
    "engine",
    "castle",
    "memory",
    "token",
    "budget",
    "notes",
    "answer",
    "question",
    "model",
    "cache",
    "quantized",
    "segment",
    "paragraph",
    "sentence",
]


def count_words(text: str) -> int:
    return len(text.split())


def count_chars(text: str) -> int:
    return len(text)


@pytest.fixture(scope="module")
def count_bpe(tiny_model_dir):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def random_text(seed: int) -> str:
    rng = random.Random(seed)

    def sentence() -> str:
        kind = rng.random()
        if kind < 0.05:
            return (
                "".join(rng.choice("漢字文書読") for _ in range(rng.randint(5, 60)))
                + "。"
            )
        if kind < 0.1:
            return "x" * rng.randint(50, 400)  # one "word" longer than a segment
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 30))]
        end = rng.choice([".", "!", "?", '."', ""])
        return " ".join(words).capitalize() + end

    paragraphs = []
    for _ in range(rng.randint(1, 12)):
        joiner = rng.choice([" ", " ", "\n", "  "])  # some text is hard-wrapped
        paragraphs.append(joiner.join(sentence() for _ in range(rng.randint(1, 8))))
    separator = rng.choice(["\n\n", "\n \n", "\n\n\n", "\r\n\r\n"])
    return (
        rng.choice(["", "  ", "\n"])
        + separator.join(paragraphs)
        + rng.choice(["", "\n", "  \n"])
    )


def check_invariants(text, segments, max_tokens, count):
    position = 0
    for expected_index, segment in enumerate(segments):
        assert segment.index == expected_index
        assert segment.text == text[segment.start : segment.end]
        assert segment.text and segment.text == segment.text.strip()
        assert segment.tokens == count(segment.text) <= max_tokens
        # Only whitespace lies between segments: nothing lost, nothing repeated.
        assert text[position : segment.start].strip() == ""
        position = segment.end
    assert text[position:].strip() == ""
    rebuilt = "".join(s.text for s in segments)
    assert re.sub(r"\s+", "", rebuilt) == re.sub(r"\s+", "", text)


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize(
    ("counter", "max_tokens"), [("words", 20), ("chars", 120), ("bpe", 48)]
)
def test_segments_are_bounded_lossless_and_deterministic(
    seed, counter, max_tokens, request
):
    count = {"words": count_words, "chars": count_chars}.get(counter)
    if count is None:
        count = request.getfixturevalue("count_bpe")
    text = random_text(seed)
    segments = split_segments(text, max_tokens, count)
    check_invariants(text, segments, max_tokens, count)
    assert split_segments(text, max_tokens, count) == segments


def test_cuts_fall_between_paragraphs_when_paragraphs_fit():
    paragraphs = [" ".join(["word"] * n) + "." for n in (5, 7, 3, 9, 4, 6, 8, 2)]
    text = "\n\n".join(paragraphs)
    segments = split_segments(text, 12, count_words)
    # Greedy: 5+7, 3+9, 4+6 (8 more would be 18), 8+2.
    assert [s.text for s in segments] == [
        "\n\n".join(paragraphs[i:j]) for i, j in ((0, 2), (2, 4), (4, 6), (6, 8))
    ]


@pytest.mark.parametrize("seed", range(5))
def test_packing_is_greedy_no_segment_could_take_the_next_paragraph(seed):
    rng = random.Random(seed)
    paragraphs = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40))) + "."
        for _ in range(60)
    ]
    segments = split_segments("\n\n".join(paragraphs), 40, count_words)
    assert sum(s.text.count("\n\n") + 1 for s in segments) == len(paragraphs)
    for current, following in zip(segments, segments[1:], strict=False):
        first_paragraph = following.text.split("\n\n")[0]
        assert current.tokens + count_words(first_paragraph) > 40


def test_a_long_paragraph_is_cut_between_sentences():
    sentences = [
        f"Sentence {i} has " + "some words " * (i % 4 + 1) + "in it." for i in range(12)
    ]
    text = " ".join(sentences)
    segments = split_segments(text, 16, count_words)
    assert len(segments) > 1
    for segment in segments:
        assert segment.text.startswith("Sentence") and segment.text.endswith("in it.")


def test_a_long_sentence_is_cut_between_lines_then_words():
    lines = "\n".join(f"line {i} " + "x " * 3 for i in range(10))  # no full stops
    segments = split_segments(lines, 10, count_words)
    assert all(s.text.startswith("line") for s in segments)
    words = " ".join(f"w{i}" for i in range(25))
    assert [s.tokens for s in split_segments(words, 10, count_words)] == [10, 10, 5]


def test_a_word_longer_than_a_segment_is_cut_inside():
    text = "a" * 1000
    segments = split_segments(text, 100, count_chars)
    assert [len(s.text) for s in segments] == [100] * 10


def test_cjk_text_is_cut_after_full_stops():
    sentences = ["漢字" * 10 + "。" for _ in range(6)]
    segments = split_segments("".join(sentences), 45, count_chars)
    assert [s.text for s in segments] == ["".join(sentences[:2])] * 3


def test_whitespace_only_gives_no_segments_and_bad_bounds_are_refused():
    assert split_segments(" \n\n\t ", 10, count_words) == []
    with pytest.raises(ValueError, match="at least 1"):
        split_segments("text", 0, count_words)
    with pytest.raises(ValueError, match="whole number"):
        split_segments("text", 2.5, count_words)


def test_truncate_keeps_a_prefix_cut_at_a_word(count_bpe):
    text = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    short = truncate_to_tokens(text, 5, count_bpe)
    assert text.startswith(short) and short
    assert count_bpe(short) <= 5
    assert text[len(short)] == " "  # no half word
    assert truncate_to_tokens(text, 1000, count_bpe) == text
    assert truncate_to_tokens(text, 0, count_bpe) == ""


def test_truncate_never_trades_a_word_boundary_for_tokens():
    # BPE counts are not monotonic: here a newline merges with what precedes it, so
    # dropping the half word after it (and the newline) would cost a token.
    def count(text: str) -> int:
        return len(text) - 3 * text.count("d\n")

    text = "abcd\nxyz"
    assert count("abcd") == 4 and count("abcd\nx") == 3
    assert truncate_to_tokens(text, 3, count) == "abcd\nx"
    assert truncate_to_tokens(text, 4, count) == "abcd"  # it fits: cut at the word
    assert truncate_to_tokens("x" * 10, 0, count_chars) == ""


# -- streaming ----------------------------------------------------------------------


def pieces(text: str, size: int):
    return (text[i : i + size] for i in range(0, len(text), size))


class RecordingCounter:
    """A counter that remembers the longest text it was asked to count."""

    def __init__(self, count):
        self.count = count
        self.longest = 0

    def __call__(self, text: str) -> int:
        self.longest = max(self.longest, len(text))
        return self.count(text)


def long_random_text(seed: int, parts: int = 30) -> str:
    return "\n\n".join(random_text(seed * 1000 + i) for i in range(parts))


@pytest.mark.parametrize(
    ("counter", "max_tokens", "seed"),
    [("words", 20, seed) for seed in range(10)]
    + [("chars", 120, seed) for seed in range(10)]
    # The real tokenizer is the slow one: fewer texts.
    + [("bpe", 48, seed) for seed in range(3)],
)
def test_streamed_segments_are_bounded_lossless_and_independent_of_chunking(
    seed, counter, max_tokens, request
):
    count = {"words": count_words, "chars": count_chars}.get(counter)
    if count is None:
        count = request.getfixturevalue("count_bpe")
    text = long_random_text(seed)
    window = max(max_tokens * 4 * 8, 4096)
    assert len(text) > 3 * window  # several windows, or nothing is tested
    recording = RecordingCounter(count)
    segments = list(stream_segments(pieces(text, 5000), max_tokens, recording))
    check_invariants(text, segments, max_tokens, count)
    # The tokenizer never saw the whole text, only about a window of it.
    assert recording.longest <= 2 * window
    for size in (1, 333, len(text)):
        assert list(stream_segments(pieces(text, size), max_tokens, count)) == segments


@pytest.mark.parametrize("seed", range(20))
def test_a_text_that_fits_one_window_streams_like_split_segments(seed, count_bpe):
    text = random_text(seed)
    streamed = list(stream_segments(pieces(text, 97), 48, count_bpe))
    assert streamed == split_segments(text, 48, count_bpe)


def test_a_segment_longer_than_the_window_widens_it():
    # One "word" per 2,000 tokens of a counter that sees 1 token per 40 characters:
    # a segment spans far more characters than the window is sized for.
    def sparse(text: str) -> int:
        return -(-len(text) // 40)

    text = " ".join("y" * 39_000 for _ in range(6))
    segments = list(stream_segments(pieces(text, 4096), 1000, sparse))
    check_invariants(text, segments, 1000, sparse)
    assert [s.text for s in segments] == ["y" * 39_000] * 6
    assert [s.span.tokens for s in segments] == [975] * 6


def test_streaming_whitespace_gives_nothing_and_bad_bounds_are_refused():
    assert list(stream_segments(pieces(" \n" * 10_000, 100), 10, count_words)) == []
    assert list(stream_segments([], 10, count_words)) == []
    with pytest.raises(ValueError, match="at least 1"):
        list(stream_segments(["text"], 0, count_words))
