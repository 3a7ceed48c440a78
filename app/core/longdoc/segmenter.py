"""Cut a long text into segments of at most N tokens, at the most natural boundary.

Long-document mode reads one segment at a time, so the KV cache never holds more than
one segment; where a cut falls decides what the model sees together. Cuts go between
paragraphs when they can, else between sentences, else between lines, else between
words, and only as a last resort inside a word (a long URL, or a script that does not
separate words with spaces). Pure Python: tokens are counted by a callable (the model's
tokenizer in the app, a stub in tests), so the same text and tokenizer always give the
same segments — which is what lets an interrupted reading resume at the next one.

Nothing is lost or repeated: the segments are spans of the text in order, and only the
whitespace between two segments belongs to neither.

`stream_segments` cuts a document arriving in pieces without ever holding all of it:
it cuts a window of text, hands out every segment but the last (which the window's end
may have cut short) and carries that one over into the next window. The tokenizer only
ever sees text the size of a window, never the whole document.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

CountTokens = Callable[[str], int]

# Finest last: each level is tried only on a piece the coarser ones could not fit.
_PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n\s*")
# After ., ! or ? (and a closing quote or bracket) before whitespace; CJK full stops
# need no space after them.
_SENTENCE_BREAK = re.compile(
    r"(?:(?<=[.!?…])|(?<=[.!?…][\"'”’»)\]]))\s+|(?<=[。！？])\s*"
)
_LINE_BREAK = re.compile(r"\s*\n\s*")
_WORD_BREAK = re.compile(r"\s+")
_LEVELS = (_PARAGRAPH_BREAK, _SENTENCE_BREAK, _LINE_BREAK, _WORD_BREAK)


@dataclass(frozen=True)
class SegmentSpan:
    """Where one segment lies, without its text (what a plan keeps of a long document).

    Attributes:
        index: 0-based position among the segments.
        start: Offset of its first character in the whole text.
        end: Offset just past its last character.
        tokens: Tokens of its text by the counter it was cut with.
    """

    index: int
    start: int
    end: int
    tokens: int


@dataclass(frozen=True)
class Segment:
    """One piece of a document.

    Attributes:
        index: 0-based position among the segments.
        start: Offset of its first character in the whole text.
        end: Offset just past its last character.
        text: ``whole_text[start:end]``: no leading or trailing whitespace.
        tokens: Tokens of ``text`` by the counter it was cut with.
    """

    index: int
    start: int
    end: int
    text: str
    tokens: int

    @property
    def span(self) -> SegmentSpan:
        """The segment without its text."""
        return SegmentSpan(self.index, self.start, self.end, self.tokens)


WINDOW_SEGMENTS = 8
"""Segments' worth of text cut together by `stream_segments`: each window re-cuts only
its last segment, so more is less re-counting, and less is less memory."""
CHARS_PER_TOKEN_GUESS = 4
"""Characters per token assumed to size a window (English prose; a window holding too
few segments for any text is doubled)."""


def split_segments(
    text: str, max_tokens: int, count_tokens: CountTokens
) -> list[Segment]:
    """Split ``text`` into consecutive segments of at most ``max_tokens`` tokens.

    Args:
        text: The whole document.
        max_tokens: Upper bound on each segment's token count.
        count_tokens: Returns the token count of a text (no special tokens).

    Returns:
        The segments in order; empty when ``text`` is only whitespace.

    Raises:
        ValueError: ``max_tokens`` is below 1.
    """
    _check_max_tokens(max_tokens)
    start, end = _strip(text, 0, len(text))
    if start == end:
        return []
    spans = _split(text, start, end, 0, max_tokens, count_tokens)
    return [
        Segment(index=i, start=s, end=e, text=text[s:e], tokens=n)
        for i, (s, e, n) in enumerate(spans)
    ]


def stream_segments(
    chunks: Iterable[str], max_tokens: int, count_tokens: CountTokens
) -> Iterator[Segment]:
    """Cut text arriving in pieces into segments of at most ``max_tokens`` tokens.

    Memory and tokenizer calls are bounded by a window of about `WINDOW_SEGMENTS`
    segments, whatever the text's length. The result depends only on the text, the
    limit and the counter, not on how the text was cut into ``chunks``, so a reading
    resumed later cuts the same segments; for a text that fits in one window it equals
    `split_segments`.

    Args:
        chunks: The text, in consecutive pieces of any size.
        max_tokens: Upper bound on each segment's token count.
        count_tokens: Returns the token count of a text (no special tokens).

    Yields:
        The segments in order, with offsets into the whole text.

    Raises:
        ValueError: ``max_tokens`` is below 1.
    """
    _check_max_tokens(max_tokens)
    window_chars = max(max_tokens * CHARS_PER_TOKEN_GUESS * WINDOW_SEGMENTS, 4096)
    pieces = iter(chunks)
    buffer, base, index = "", 0, 0  # buffer starts at offset `base` of the text
    want, exhausted = window_chars, False
    while True:
        parts = [buffer]
        size = len(buffer)
        while not exhausted and size < want:
            piece = next(pieces, None)
            if piece is None:
                exhausted = True
            else:
                parts.append(piece)
                size += len(piece)
        buffer = "".join(parts)
        last_window = exhausted and len(buffer) <= want
        window = buffer if last_window else buffer[:want]
        start, end = _strip(window, 0, len(window))
        # Only the last window may fit whole; counting a long one first is waste.
        spans = (
            _split(
                window, start, end, 0, max_tokens, count_tokens, check_whole=last_window
            )
            if start < end
            else []
        )
        if last_window:
            for s, e, n in spans:
                yield Segment(index, base + s, base + e, window[s:e], n)
                index += 1
            return
        if len(spans) < 2:
            want *= 2  # not one whole segment in view yet: look further
            continue
        # The last segment may continue past the window: cut it again next time.
        for s, e, n in spans[:-1]:
            yield Segment(index, base + s, base + e, window[s:e], n)
            index += 1
        keep_from = spans[-1][0]
        buffer, base, want = buffer[keep_from:], base + keep_from, window_chars


def segment_texts(
    chunks: Iterable[str], spans: Iterable[SegmentSpan]
) -> Iterator[Segment]:
    """Give planned segments their text again, from the document streamed once more.

    No tokenizer call: the spans were cut when the reading was planned, so reading a
    document costs one segmentation, not two. Only the text up to the end of the
    current span is held.

    Args:
        chunks: The text, in consecutive pieces of any size (as planned).
        spans: Spans of that text in increasing order.

    Yields:
        The segments, with their text.

    Raises:
        ValueError: The text ends before a span does (it changed since planning).
    """
    pieces = iter(chunks)
    buffer, base = "", 0  # buffer holds the text from offset `base` on
    for span in spans:
        if span.start < base:
            raise ValueError("spans must be in increasing order")
        while base + len(buffer) < span.end:
            piece = next(pieces, None)
            if piece is None:
                raise ValueError(
                    f"the text ends at {base + len(buffer)}, before segment "
                    f"{span.index + 1} ends at {span.end}"
                )
            buffer += piece
        text = buffer[span.start - base : span.end - base]
        buffer, base = buffer[span.end - base :], span.end
        yield Segment(span.index, span.start, span.end, text, span.tokens)


def truncate_to_tokens(text: str, max_tokens: int, count_tokens: CountTokens) -> str:
    """Return a prefix of ``text`` with at most ``max_tokens`` tokens, as long as found.

    A word cut in half is dropped whole when there is an earlier space to cut at and
    that does not cost tokens (BPE counts are not monotonic: ``"))\\n"`` can be one
    token where ``"))"`` is two).

    Args:
        text: The text to shorten.
        max_tokens: Upper bound on the result's tokens.
        count_tokens: Returns the token count of a text.
    """
    if count_tokens(text) <= max_tokens:
        return text
    cut = _longest_fitting_prefix(text, 0, len(text), max_tokens, count_tokens)
    if count_tokens(text[:cut]) > max_tokens:
        return ""  # not even the first character fits
    if not text[cut].isspace():
        space = max(text.rfind(blank, 0, cut) for blank in " \n\t")
        tidy = text[:space].rstrip() if space > 0 else ""
        if tidy and count_tokens(tidy) <= max_tokens:
            return tidy
    return text[:cut]


def _check_max_tokens(max_tokens: object) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
        raise ValueError(f"max_tokens must be a whole number, not {max_tokens!r}")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, not {max_tokens}")


def _split(
    text: str,
    start: int,
    end: int,
    level: int,
    max_tokens: int,
    count: CountTokens,
    *,
    check_whole: bool = True,
) -> list[tuple[int, int, int]]:
    """Return ``(start, end, tokens)`` chunks covering ``text[start:end]``.

    ``check_whole=False`` skips counting the whole span first (a window of many
    segments): packing its units gives the same chunks, one tokenizer pass cheaper.
    """
    if check_whole:
        tokens = count(text[start:end])
        if tokens <= max_tokens:
            return [(start, end, tokens)]
    if level == len(_LEVELS):
        return _hard_cut(text, start, end, max_tokens, count)
    units = _units(text, start, end, _LEVELS[level])
    if len(units) == 1:
        return _split(
            text, start, end, level + 1, max_tokens, count, check_whole=check_whole
        )
    return _pack(text, units, level, max_tokens, count)


def _pack(
    text: str,
    units: list[tuple[int, int]],
    level: int,
    max_tokens: int,
    count: CountTokens,
) -> list[tuple[int, int, int]]:
    """Group consecutive units greedily into chunks of at most ``max_tokens``."""
    # Each unit is counted with the whitespace before it: that is what it adds to a
    # chunk it joins. The sum is only an estimate (BPE merges across the joins), so
    # every chunk is counted again as a whole before it is accepted.
    costs = [
        count(text[(units[i - 1][1] if i else s) : e]) for i, (s, e) in enumerate(units)
    ]
    chunks: list[tuple[int, int, int]] = []
    i = 0
    while i < len(units):
        j, estimate = i + 1, costs[i]
        while j < len(units) and estimate + costs[j] <= max_tokens:
            estimate += costs[j]
            j += 1
        while True:
            s, e = units[i][0], units[j - 1][1]
            tokens = count(text[s:e])
            if tokens <= max_tokens or j - i == 1:
                break
            j -= 1
        if tokens <= max_tokens:
            chunks.append((s, e, tokens))
        else:  # one unit alone is too long: cut it at the next finer level
            chunks.extend(_split(text, s, e, level + 1, max_tokens, count))
        i = j
    return chunks


def _hard_cut(
    text: str, start: int, end: int, max_tokens: int, count: CountTokens
) -> list[tuple[int, int, int]]:
    """Cut inside a word: the longest prefixes that fit, one after another."""
    chunks = []
    while start < end:
        cut = _longest_fitting_prefix(text, start, end, max_tokens, count)
        chunks.append((start, cut, count(text[start:cut])))
        start = cut
    return chunks


def _longest_fitting_prefix(
    text: str, start: int, end: int, max_tokens: int, count: CountTokens
) -> int:
    """Return the largest ``cut`` in (start, end] with ``text[start:cut]`` fitting.

    Always at least one character past ``start``, so cutting always makes progress.
    """
    low, high = start + 1, end  # invariant: the answer is in [low, high]
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[start:middle]) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return low


def _units(
    text: str, start: int, end: int, breaks: re.Pattern
) -> list[tuple[int, int]]:
    """Return the non-blank spans of ``text[start:end]`` between matches of ``breaks``."""
    units = []
    position = start
    for match in breaks.finditer(text, start, end):
        if match.start() > position:
            units.append(_strip(text, position, match.start()))
        position = max(position, match.end())
    if position < end:
        units.append(_strip(text, position, end))
    return [(s, e) for s, e in units if s < e]


def _strip(text: str, start: int, end: int) -> tuple[int, int]:
    """Return ``(start, end)`` moved inwards past whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
