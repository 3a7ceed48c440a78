"""Recognise a model-written summary that is junk, so the extractive one replaces it.

A new user saw "1111…1111" shown as "Summary written by the model" while the pass key
and the name were lost. Two checks catch that family: text made of one repeated token
(or a handful cycling), and text that shares no word with what it summarises. Pure
text rules, cheap and bounded; the words returned go on the trim card.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+")
_RUN = re.compile(r"(.)\1{15,}", re.DOTALL)
# Below this share of distinct words among at least `_MIN_WORDS`, the text repeats.
_MIN_DISTINCT_SHARE = 0.3
_MIN_WORDS = 8
_SOURCE_CHARS = 200_000
_MIN_OVERLAP_WORD = 3


def degenerate_reason(summary: str, source_texts: list[str]) -> str:
    """Return why ``summary`` is degenerate, or an empty string when it looks sound.

    Args:
        summary: The model's summary text (without the header).
        source_texts: The texts it summarises (dropped messages, earlier summary).
    """
    text = summary.strip()
    if not text:
        return "it was empty"
    if _RUN.search(text):
        return "it repeats one character"
    words = [w.lower() for w in _WORD.findall(text)]
    if not words:
        return "it has no words"
    if len(words) >= _MIN_WORDS and len(set(words)) / len(words) < _MIN_DISTINCT_SHARE:
        return "it repeats the same few words"
    source_words: set[str] = set()
    budget = _SOURCE_CHARS
    for source in source_texts:
        source_words.update(w.lower() for w in _WORD.findall(source[:budget]))
        budget -= min(len(source), budget)
        if budget <= 0:
            break
    content = {w for w in words if len(w) >= _MIN_OVERLAP_WORD or w.isdigit()}
    if source_words and content and not content & source_words:
        return "it shares no word with the conversation it summarises"
    return ""
