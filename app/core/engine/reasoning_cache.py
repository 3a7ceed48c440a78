"""Cut a finished reply's reasoning out of its conversation's cache (engine thread).

`app.core.reasoning.history.reasoning_cut` says which entries to drop so the cache is
a prefix of the template's rendering of the history; this applies it with the splice
trims use (`ConversationCache.splice`: the answer's entries move down next to the
prompt's, their rotary positions kept as they were, nothing recomputed). A cache with
sliding-window or recurrent layers cannot drop entries from the middle: it keeps only
the matching prefix, and the next turn re-prefills the answer, as before; the report
says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.core.engine.cache.conversation_cache import (
    ConversationCache,
    SpliceUnsupported,
)
from app.core.reasoning.history import reasoning_cut


@dataclass(frozen=True)
class ReasoningCutReport:
    """What aligning the cache with the rendered history did.

    Attributes:
        dropped: Cache entries cut out (the reasoning span and its markers).
        kept: Entries held afterwards.
        trimmed: Entries dropped at the end (the reply re-tokenized differently, or
            the cache could not splice): the next turn prefills them.
        method: ``none`` (already aligned), ``splice``, ``truncate`` (fallback) or
            ``reset`` (nothing matched).
        reason: Why the fallback was used (empty otherwise).
        seconds: Wall time of the cut.
    """

    dropped: int
    kept: int
    trimmed: int
    method: str
    reason: str = ""
    seconds: float = 0.0


def cut_reasoning(cache: ConversationCache, rendered: list[int]) -> ReasoningCutReport:
    """Make ``cache`` a prefix of ``rendered`` by cutting one span out of it.

    Args:
        cache: The conversation's cache after a reply.
        rendered: The history's rendering for the next turn (`history`).
    """
    started = time.perf_counter()
    held = cache.offset
    ids = list(cache.token_ids[:held])
    cut = reasoning_cut(ids, rendered)
    if cut is None:
        kept = cache.keep_at_most(_common(ids, rendered))
        return ReasoningCutReport(
            0, kept, held - kept, "truncate", "the reply renders differently",
            time.perf_counter() - started,
        )  # fmt: skip
    if cut.dropped == 0:
        kept = cache.keep_at_most(cut.kept)
        method = "none" if kept == held else "truncate"
        return ReasoningCutReport(
            0, kept, held - kept, method, "", time.perf_counter() - started
        )
    if cut.start == 0 or not cache.can_splice():
        kept = cache.keep_at_most(cut.start)
        reason = "" if cut.start else "the cut starts at the first token"
        if not cache.can_splice():
            from app.core.engine.cache.cache_splice import unspliceable_reason

            reason = unspliceable_reason(cache.layers)
        return ReasoningCutReport(
            0, kept, held - kept, "truncate", reason, time.perf_counter() - started
        )
    try:
        cache.splice(cut.start, cut.stop, [])
    except SpliceUnsupported as exc:
        kept = cache.keep_at_most(cut.start)
        return ReasoningCutReport(
            0, kept, held - kept, "truncate", str(exc), time.perf_counter() - started
        )
    kept = cache.keep_at_most(cut.kept)
    return ReasoningCutReport(
        cut.dropped,
        kept,
        held - cut.dropped - kept,
        "splice",
        "",
        time.perf_counter() - started,
    )


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
