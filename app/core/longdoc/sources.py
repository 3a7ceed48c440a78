"""Which segments an answer's points come from, so a claim can be checked in the text.

The notes a reading keeps are rewritten at every segment, so by the end nothing in them
says where a fact was read; the model is asked to cite parts, but a small model may not
(and a random-weight one never does). So each point of the answer is traced back to
the document itself: a part the model cited in brackets counts first; otherwise the
segments sharing the most of the point's distinctive words (rarer across segments
weigh more, like tf-idf) are named. The result is appended to the answer as a short
"Sources" list of segment numbers. One more streaming pass over the document; only
the words the answer uses are kept per segment.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from app.core.longdoc.segmenter import Segment

MAX_POINTS = 12
MAX_SOURCES_PER_POINT = 3
RELATIVE_SCORE = 0.6
"""A segment is named when it scores at least this share of the best one's score."""
QUOTE_WORDS = 8

_WORD = re.compile(r"\w+", re.UNICODE)
_BULLET = re.compile(r"^\s*(?:[-*+•]|\d+[.)])\s+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_CITED = re.compile(
    r"[\[(]\s*(?:(?:parts?|segments?|p\.)\s*)?(\d+(?:\s*(?:,|and|&|-|–)\s*\d+)*)\s*[\])]",
    re.IGNORECASE,
)
_COMMON_WORDS = """about above after again against also because been before being below between
    both could does doing down during each from further have having here itself just
    more most other over same should some such than that their them then there these
    they this those through under until very were what when where which while whom
    with would your yours into only part parts segment segments document notes"""
_STOPWORDS = frozenset(_COMMON_WORDS.split())


MIN_LETTER_SHARE = 0.5
"""A point needs at least this share of letters among its visible characters: a run of
braces or a line of code is not a claim to trace."""
_ECHO_WORDS = frozenset({"question", "answer", "summarize", "summary"})


def answer_points(answer: str, question: str = "") -> list[str]:
    """Split an answer into its points: list items, else paragraphs, else sentences.

    What is not a claim is left out: a point that is mostly punctuation (``}}}}``),
    one with no word to trace, and one that only repeats the question.

    Args:
        answer: The answer's text.
        question: The question asked, so an echo of it is not listed as a point.
    """
    lines = [line for line in answer.splitlines() if line.strip()]
    bullets = [line for line in lines if _BULLET.match(line)]
    if len(bullets) >= 2:
        points = [_BULLET.sub("", line).strip() for line in bullets]
    else:
        points = [p.strip() for p in re.split(r"\n\s*\n", answer) if p.strip()]
        if len(points) == 1:
            points = [s.strip() for s in _SENTENCE_END.split(points[0]) if s.strip()]
    asked = content_words(question) | _ECHO_WORDS
    kept = []
    for point in points:
        point = " ".join(point.split())  # one line, however the model wrapped it
        visible = [c for c in point if not c.isspace()]
        letters = sum(c.isalpha() for c in visible)
        words = content_words(point)
        if not words or letters < MIN_LETTER_SHARE * len(visible) or words <= asked:
            continue
        kept.append(point)
    return kept[:MAX_POINTS]


def content_words(text: str) -> set[str]:
    """Distinctive words: four letters or more, or any number, minus common words."""
    words = set()
    for word in _WORD.findall(text.lower()):
        if (len(word) >= 4 or word.isdigit()) and word not in _STOPWORDS:
            words.add(word)
    return words


def cited_segments(point: str, total: int) -> tuple[int, ...]:
    """The segment numbers (1-based) a point cites in brackets, within ``1..total``."""
    cited: set[int] = set()
    for match in _CITED.finditer(point):
        numbers = [int(n) for n in re.findall(r"\d+", match.group(1))]
        ranged = re.search(r"\d+\s*[-–]\s*\d+", match.group(1))
        if ranged and len(numbers) == 2 and numbers[0] <= numbers[1] <= total:
            numbers = list(range(numbers[0], numbers[1] + 1))
        cited.update(n for n in numbers if 1 <= n <= total)
    return tuple(sorted(cited))


def find_sources(
    answer: str, segments: Iterable[Segment], total: int, question: str = ""
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Trace each point of ``answer`` to the segments (1-based) it most likely uses.

    Args:
        answer: The answer's text.
        segments: The document's segments with their text, in order (streamed).
        total: Number of segments.
        question: The question asked (an answer's echo of it is not a point).

    Returns:
        ``(point, segment numbers)`` per point; an empty tuple of numbers when no
        segment shares a distinctive word with the point.
    """
    points = answer_points(answer, question)
    if not points:
        return ()
    wanted = [content_words(point) for point in points]
    vocabulary = set().union(*wanted)
    found: list[set[str]] = []  # per segment: the answer's words it contains
    frequency: dict[str, int] = {}
    for segment in segments:
        present = content_words(segment.text) & vocabulary
        found.append(present)
        for word in present:
            frequency[word] = frequency.get(word, 0) + 1
    count = max(len(found), 1)
    sources = []
    for point, words in zip(points, wanted, strict=True):
        cited = cited_segments(point, total)
        if cited:
            sources.append((point, cited))
            continue
        scores = [
            sum(math.log(1 + count / frequency[w]) for w in words & present)
            for present in found
        ]
        best = max(scores, default=0.0)
        if best <= 0:
            sources.append((point, ()))
            continue
        ranked = sorted(
            (i for i, score in enumerate(scores) if score >= RELATIVE_SCORE * best),
            key=lambda i: -scores[i],
        )[:MAX_SOURCES_PER_POINT]
        sources.append((point, tuple(sorted(i + 1 for i in ranked))))
    return tuple(sources)


def sources_text(sources: tuple[tuple[str, tuple[int, ...]], ...]) -> str:
    """The sources as a Markdown list appended to the answer ("" when none)."""
    if not sources:
        return ""
    lines = ["", "", "**Sources** (segments of the document each point draws on):"]
    for point, numbers in sources:
        words = point.split()
        quote = " ".join(words[:QUOTE_WORDS]) + (
            "…" if len(words) > QUOTE_WORDS else ""
        )
        quote = quote.replace("*", "").replace("_", " ").strip()
        if numbers:
            noun = "segment" if len(numbers) == 1 else "segments"
            where = f"{noun} {', '.join(map(str, numbers))}"
        else:
            where = "no segment shares its words"
        lines.append(f"- “{quote}” — {where}")
    return "\n".join(lines)
