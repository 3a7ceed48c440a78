"""How important a sentence is to keep, and which statements a later one supersedes.

What the extractive summary keeps and what recall brings back are chosen by this
score: the marks of a fact (`facts.fact_score`: numbers, names, quoted strings, what
the user says about themselves), plus decisions ("we decided …", "let's go with …")
and corrections ("actually, it's …", "… is now …"). A correction also *supersedes*:
"my locker number is 42" followed later by "update: my locker number is now 17" (or
the reply "your locker number is 17", or "actually, it's 17") leaves the first
statement out of date, so the summary drops it and recall does not bring it back — the
model should not have to choose between two values (measured on the reference model:
with both in view it copied the old one). Pure text rules: no model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from app.core.trim.facts import fact_score, sentences

# "my locker number is now 17", "your cat's name is Juniper", "our budget was 40 k".
_CLAIM = re.compile(
    r"\b(?P<owner>my|your|our)\s+(?P<subject>[a-z][\w'’-]*(?:\s+[a-z][\w'’-]*){0,3}?)\s+"
    r"(?:is|are|was|were|will be|has been|changed to|moved to|switched to)\s+"
    r"(?:now\s+|actually\s+|still\s+|no longer\s+)?"
    r"(?P<value>(?:(?!\s(?:and|but|so|because|which|who)\s)[^.,;:!?]){1,60})",
    re.IGNORECASE,
)
# A correction with no subject of its own ("Actually, it's 17.") corrects the last claim.
_BARE_CORRECTION = re.compile(
    r"^(?:actually|no|correction|sorry|wait|oops|update)\b[\s,:!-]*"
    r"(?:it'?s|it is|that'?s|that is|make (?:that|it)|i meant)\s+"
    r"(?P<value>[^.,;:!?]{1,60})",
    re.IGNORECASE,
)
_CORRECTION = re.compile(
    r"\b(actually|update[ds]?|correction|changed|no longer|instead|now is|is now|"
    r"are now|i meant|not \w+ but)\b",
    re.IGNORECASE,
)
_DECISION = re.compile(
    r"\b(decided|decision|we'll go with|let's go with|let's use|agreed|we chose|"
    r"i chose|final answer|settled on|going with)\b",
    re.IGNORECASE,
)
_VALUE_END = re.compile(r"\s+(?:and|but|so|because|which|who)\s+.*$", re.IGNORECASE)
# A subject never starts with these (they end a clause, not name a thing).
_NOT_SUBJECTS = frozenset({"own", "turn", "question", "answer", "message", "point"})


@dataclass(frozen=True)
class Claim:
    """A statement of a value: ``subject`` is (now) ``value``.

    Attributes:
        subject: Whose and what it is about, lowercased ("user: locker number"):
            the user's "my" is the assistant's "your".
        value: The value, lowercased, whitespace folded.
    """

    subject: str
    value: str


def importance(sentence: str, role: str) -> int:
    """How much a later question may need ``sentence`` (0: nothing).

    Args:
        sentence: One folded sentence.
        role: Who said it (``user`` or ``assistant``).
    """
    score = fact_score(sentence, role)
    if _DECISION.search(sentence):
        score += 2
    if _CORRECTION.search(sentence) and (
        _CLAIM.search(sentence) or _BARE_CORRECTION.search(sentence)
    ):
        score += 3
    return score


def claims(sentence: str, role: str, last_subject: str | None = None) -> list[Claim]:
    """The values ``sentence`` (said by ``role``) states; a bare correction takes
    ``last_subject``."""
    found = []
    for match in _CLAIM.finditer(sentence):
        subject = " ".join(match.group("subject").lower().split())
        if subject.split()[0] in _NOT_SUBJECTS:
            continue
        mine = match.group("owner").lower() in ("my", "our")
        owner = "user" if mine == (role == "user") else "assistant"
        found.append(Claim(f"{owner}: {subject}", _value(match.group("value"))))
    if not found and last_subject:
        bare = _BARE_CORRECTION.search(sentence)
        if bare:
            found.append(Claim(last_subject, _value(bare.group("value"))))
    return found


def _value(text: str) -> str:
    return " ".join(_VALUE_END.sub("", text).lower().split())


def superseded(texts: Sequence[tuple[str, str]]) -> list[set[int]]:
    """For texts in conversation order, which of each one's sentences are out of date.

    A sentence is out of date when every value it states was stated differently, for
    the same subject, by a later text (the newest statement of a subject wins).

    Args:
        texts: ``(role, text)`` of messages (or summary lines), oldest first.

    Returns:
        For each text, the indexes (in `facts.sentences` of it) of its out-of-date
        sentences.
    """
    stated: list[tuple[int, int, list[Claim]]] = []
    newest: dict[str, tuple[tuple[int, int], str]] = {}
    last_subject: str | None = None
    for position, (role, text) in enumerate(texts):
        for index, sentence in enumerate(sentences(text)):
            found = claims(sentence, role, last_subject)
            if not found:
                continue
            stated.append((position, index, found))
            for claim in found:
                newest[claim.subject] = ((position, index), claim.value)
            last_subject = found[-1].subject
    result: list[set[int]] = [set() for _ in texts]
    for position, index, found in stated:
        if all(
            newest[c.subject][0] > (position, index) and newest[c.subject][1] != c.value
            for c in found
        ):
            result[position].add(index)
    return result
