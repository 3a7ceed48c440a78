"""Choose the recalled pairs that fit the budget, and write the block the model reads.

Pairs come best first; whole user+reply pairs are taken while they fit (never a
summary of them). When the best pair alone is larger than the budget its texts are cut
at a sentence, and the message says it was cut. The block is written oldest first and
marked at both ends, before the new message's own text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol

from app.core.store.records import RecalledMessage

BLOCK_START = "[Recalled earlier messages]"
BLOCK_END = "[End of recall]"
# A share of the limit, up to a cap. 0.3 rather than 0.2: on LoCoMo at 2K every
# evidence turn was in view for 58 % of the questions against 50 % (0.35: 60 %,
# 0.4: 62 %), while the newest turns kept verbatim there fell from about 560 to 360
# tokens (0.4: 210); docs/measured.md.
RECALL_SHARE = 0.3
RECALL_MAX_TOKENS = 1024
# Below this, no pair says anything useful.
MIN_RECALL_TOKENS = 24
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MAX_PAIRS = 8


class Recallable(Protocol):
    """A message recall can put back: a stored `Message` or an `in_memory.Original`."""

    @property
    def id(self) -> int: ...

    @property
    def role(self) -> str: ...

    @property
    def content(self) -> str: ...


def recall_budget(limit: int) -> int:
    """Tokens reserved for recall in a conversation of ``limit`` tokens."""
    return min(int(RECALL_SHARE * limit), RECALL_MAX_TOKENS)


def _who(role: str) -> str:
    return "User" if role == "user" else "Assistant"


def render_block(recalled: Sequence[RecalledMessage]) -> str:
    """The marked block for ``recalled`` (oldest first); empty when nothing is."""
    if not recalled:
        return ""
    lines = [BLOCK_START]
    for item in sorted(recalled, key=lambda r: r.message_id):
        lines.append(f"{_who(item.role)}: {item.text}" + (" […]" if item.cut else ""))
    lines.append(BLOCK_END)
    return "\n".join(lines)


def with_recall(content: str, recalled: Sequence[RecalledMessage]) -> str:
    """The text a user message is sent as: its recall block, then its own text."""
    block = render_block(recalled)
    return f"{block}\n\n{content}" if block else content


def choose(
    pairs: Sequence[tuple[Recallable, ...]],
    budget: int,
    count_tokens: Callable[[str], int],
) -> tuple[RecalledMessage, ...]:
    """Take pairs, best first, while the block stays within ``budget`` tokens.

    Args:
        pairs: Candidate pairs, best first (``Store.search_trimmed``).
        budget: Tokens the block may take.
        count_tokens: The model's tokenizer count.

    Returns:
        The recalled messages (empty when nothing fits).
    """
    if budget < MIN_RECALL_TOKENS or not pairs:
        return ()
    overhead = count_tokens(f"{BLOCK_START}\n{BLOCK_END}\n\n") + 1
    used = overhead
    chosen: list[RecalledMessage] = []
    for pair in pairs[:_MAX_PAIRS]:
        items = [RecalledMessage(m.id, m.role, m.content) for m in pair]
        cost = sum(count_tokens(f"{_who(r.role)}: {r.text}") + 1 for r in items)
        if used + cost <= budget:
            chosen.extend(items)
            used += cost
        elif not chosen:
            chosen.extend(_cut_pair(items, budget - overhead, count_tokens))
            break
    # The per-line estimate can be off by a token where lines join: check exactly.
    while chosen and count_tokens(render_block(chosen)) > budget:
        chosen.pop()
    return tuple(chosen)


def _cut_pair(
    items: list[RecalledMessage], room: int, count_tokens: Callable[[str], int]
) -> list[RecalledMessage]:
    """Cut a pair's texts at sentences to fit ``room`` (the question keeps half)."""
    result: list[RecalledMessage] = []
    share = room // max(len(items), 1)
    for item in items:
        line_room = share - count_tokens(f"{_who(item.role)}: ") - 3
        text = _cut_at_sentence(item.text, line_room, count_tokens)
        if text:
            result.append(RecalledMessage(item.message_id, item.role, text, cut=True))
    return result


def _cut_at_sentence(text: str, room: int, count_tokens: Callable[[str], int]) -> str:
    """The longest run of whole leading sentences of ``text`` within ``room`` tokens."""
    if room <= 0:
        return ""
    kept: list[str] = []
    used = 0
    for sentence in _SENTENCE_END.split(" ".join(text[:20_000].split())):
        cost = count_tokens(sentence) + 1
        if used + cost > room:
            break
        kept.append(sentence)
        used += cost
    if kept:
        return " ".join(kept)
    words = text.split()
    # Not even one sentence fits: as many words as do.
    low, high = 0, min(len(words), room)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(" ".join(words[:middle])) <= room:
            low = middle
        else:
            high = middle - 1
    return " ".join(words[:low])
