"""A summary made without calling the model: deterministic, bounded, always available.

Used for the demo model (whose own summaries would be noise), for the ``extractive``
summary mode, and as the fallback when a model summary fails or is degenerate. Each
dropped message gives one line: the sentences of it that carry facts (numbers, names,
quoted strings, what the user said about themselves — `facts.fact_score`), or its first
sentence when none does. Sentences are scored by `importance.importance` (facts,
decisions, corrections), and a statement a later one supersedes ("my locker number is
now 17" after "… is 42") is left out, so the summary holds the current value only.
When the lines do not all fit the token budget, important lines win over plain ones
and newer lines over older ones; the kept lines are written oldest first.

The work is linear in the number of dropped messages and bounded: each message is
scanned up to a fixed number of characters (and only the newest
`MAX_SCANNED_MESSAGES`), each line is tokenized at most once
(the kept text is counted once more, exactly), and a cancel token is checked every
few messages. (It used to re-join and re-tokenize all remaining lines for each line it
dropped: 243 s for 2,000 dropped messages.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from app.core.cancel import CancelToken
from app.core.errors import KnownError
from app.core.trim.facts import is_self_statement, sentences
from app.core.trim.importance import importance, superseded

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MAX_SENTENCE_CHARS = 240
# A line gathers a message's fact sentences up to this many characters.
_MAX_LINE_CHARS = 320
HEADER = "Summary of the earlier conversation:"
# Cancel is checked this often (messages); scanning one message is bounded.
CANCEL_EVERY = 64
# Once this many candidate lines in a row did not fit, the rest will not either.
_MAX_MISSES = 64
# At most this many of the newest dropped messages are read (an imported history of
# 100,000 messages is trimmed in one go); older ones stay findable by recall.
MAX_SCANNED_MESSAGES = 5_000
# Rounds of exact counting that correct the per-line estimate at line joins.
_MAX_FIX_ROUNDS = 4


class TrimCancelled(KnownError):
    """The trim was stopped before its summary was written; nothing was changed."""


def first_sentence(text: str) -> str:
    """Return the first sentence of ``text``, whitespace folded, at most ~240 chars."""
    folded = " ".join(text[:4096].split())
    sentence = _SENTENCE_END.split(folded, maxsplit=1)[0] if folded else ""
    return _cut_chars(sentence, _MAX_SENTENCE_CHARS)


def _cut_chars(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + "…"


@dataclass(frozen=True)
class _Line:
    order: int
    text: str
    tier: int


def message_line(
    role: str, content: str, out_of_date: set[int] | frozenset[int] = frozenset()
) -> tuple[str, int]:
    """Return a message's summary line and its tier.

    Tiers: 3 the user's statements about themselves and corrections, 2 sentences
    with several marks of importance, 1 any, 0 none.

    Args:
        role: ``user`` or ``assistant``.
        content: The message text.
        out_of_date: Indexes of its sentences a later message superseded (left out).
    """
    who = "User" if role == "user" else "Assistant"
    current = [s for i, s in enumerate(sentences(content)) if i not in out_of_date]
    scored = [(s, importance(s, role)) for s in current]
    facts = [(s, score) for s, score in scored if score > 0]
    if not facts:
        sentence = first_sentence(content) if not out_of_date else ""
        if out_of_date and current:
            sentence = _cut_chars(current[0], _MAX_SENTENCE_CHARS)
        return (f"- {who}: {sentence}", 0) if sentence else ("", 0)
    parts: list[str] = []
    used = 0
    for sentence, _ in facts:
        if used and used + len(sentence) + 1 > _MAX_LINE_CHARS:
            break
        sentence = _cut_chars(sentence, _MAX_LINE_CHARS)
        parts.append(sentence)
        used += len(sentence) + 1
    return f"- {who}: {' '.join(parts)}", _tier(facts, role)


def _tier(facts: list[tuple[str, int]], role: str) -> int:
    if any(is_self_statement(sentence, role) for sentence, _ in facts):
        return 3
    if max(score for _, score in facts) >= 6:  # a correction of a fact
        return 3
    return 2 if max(score for _, score in facts) >= 3 else 1


def _earlier_lines(previous_summary: str) -> list[tuple[str, str, str]]:
    """The lines of an earlier summary as ``(prefix, role, text)``: kept as lines of
    the new one (facts survive), unless a newer message supersedes them."""
    body = previous_summary.replace(HEADER, "\n").strip()
    lines: list[tuple[str, str, str]] = []
    for raw in body.splitlines()[:512]:
        line = " ".join(raw.split())
        if not line:
            continue
        if not line.startswith("- "):
            line = f"- Before that: {_cut_chars(line, _MAX_LINE_CHARS)}"
        role = "user" if line.startswith("- User:") else "assistant"
        prefix, _, text = line.partition(": ")
        lines.append((prefix, role, text))
    return lines


def _earlier_line(
    prefix: str, role: str, text: str, out_of_date: set[int]
) -> tuple[str, int]:
    """An earlier summary's line again (its out-of-date sentences left out)."""
    kept = [s for i, s in enumerate(sentences(text)) if i not in out_of_date]
    if not kept:
        return "", 0
    facts = [(s, importance(s, role)) for s in kept]
    facts = [(s, score) for s, score in facts if score > 0]
    line = f"{prefix}: {' '.join(kept)}" if out_of_date else f"{prefix}: {text}"
    return line, _tier(facts, role) if facts else 0


def extractive_summary(
    messages: list[tuple[str, str]],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    previous_summary: str = "",
    cancel: CancelToken | None = None,
) -> str:
    """Summarise dropped messages within ``max_tokens``.

    Args:
        messages: ``(role, content)`` pairs, oldest first.
        max_tokens: Upper bound on the summary's tokens.
        count_tokens: Counts the tokens of a text with the model's tokenizer.
        previous_summary: An earlier summary being folded into this one.
        cancel: Stops the work between messages.

    Returns:
        The summary text: the header and at least one line (a line cut to the words
        that fit when the budget is smaller than any whole line).

    Raises:
        TrimCancelled: ``cancel`` was set before the summary was written.
    """
    candidates: list[_Line] = []
    earlier = _earlier_lines(previous_summary) if previous_summary else []
    skipped = max(len(messages) - MAX_SCANNED_MESSAGES, 0)
    scanned = messages[skipped:]
    # The newest statement of a value wins (earlier summary lines included).
    out_of_date = superseded(
        [(role, text) for _, role, text in earlier] + list(scanned)
    )
    for (prefix, role, text), stale in zip(earlier, out_of_date, strict=False):
        line, tier = _earlier_line(prefix, role, text, stale)
        if line:
            candidates.append(_Line(len(candidates), line, tier))
    if skipped:
        noun = "message is" if skipped == 1 else "messages are"
        line = (
            f"- {skipped:,} older {noun} not summarised here (recall still finds them)."
        )
        candidates.append(_Line(len(candidates), line, 0))
    for index, (role, content) in enumerate(scanned):
        if cancel is not None and index % CANCEL_EVERY == 0 and cancel.cancelled:
            raise TrimCancelled("The trim was stopped; nothing was changed.")
        text, tier = message_line(role, content, out_of_date[len(earlier) + index])
        if text:
            candidates.append(_Line(len(candidates), text, tier))
    if not candidates:
        count = len(messages)
        noun = "message" if count == 1 else "messages"
        return f"{HEADER}\n- {count} earlier {noun} without any text."
    # Facts first, then the newest: what a later question most likely needs.
    ranked = sorted(candidates, key=lambda line: (line.tier, line.order), reverse=True)
    chosen = _choose(ranked, max_tokens, count_tokens, cancel)
    if not chosen:
        return _cut_to_fit(ranked[0].text, max_tokens, count_tokens)
    return _render(chosen)


def _render(lines: list[tuple[_Line, int]]) -> str:
    ordered = sorted((line for line, _ in lines), key=lambda line: line.order)
    return "\n".join([HEADER, *(line.text for line in ordered)])


def _choose(
    ranked: list[_Line],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    cancel: CancelToken | None,
) -> list[tuple[_Line, int]]:
    """Pick lines by rank while their counted tokens fit; correct once exactly.

    Each line is counted once; a line costs its tokens plus one for the newline. The
    estimate can be off by a token or two where lines join, so the joined text is
    counted exactly and the lowest-ranked lines go until it fits.
    """
    used = count_tokens(HEADER)
    chosen: list[tuple[_Line, int]] = []
    misses = 0
    for position, line in enumerate(ranked):
        if cancel is not None and position % CANCEL_EVERY == 0 and cancel.cancelled:
            raise TrimCancelled("The trim was stopped; nothing was changed.")
        cost = count_tokens(line.text) + 1
        if used + cost <= max_tokens:
            chosen.append((line, cost))
            used += cost
            misses = 0
        else:
            misses += 1
            if misses >= _MAX_MISSES or max_tokens - used <= 2:
                break
    for _ in range(_MAX_FIX_ROUNDS):
        if not chosen:
            return chosen
        over = count_tokens(_render(chosen)) - max_tokens
        if over <= 0:
            return chosen
        while chosen and over > 0:
            _, cost = chosen.pop()
            over -= cost
    return chosen if chosen and count_tokens(_render(chosen)) <= max_tokens else []


def _cut_to_fit(line: str, max_tokens: int, count_tokens: Callable[[str], int]) -> str:
    """The header and as many words of ``line`` as fit (at least its first words)."""
    words = line.split(" ")

    def text(n: int) -> str:
        cut = " ".join(words[:n])
        return f"{HEADER}\n{cut}" + ("…" if n < len(words) else "")

    if count_tokens(text(len(words))) <= max_tokens:
        return text(len(words))
    # "- User: first" is the shortest line that still says something.
    low, high = min(3, len(words)), len(words)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(text(middle)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return text(low)
