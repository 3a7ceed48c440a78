"""Carry out a trim plan: write the summary, fix the KV cache, record it in the store.

The summary is written first (by the model on its live cache, or extractively), then the
cache is changed to hold system prompt + summary + kept turns: by splicing (keep the
cached KV, compute only the summary's) or by rebuilding (re-prefill; exact). A cache
that cannot be spliced falls back to a rebuild and says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.core.cancel import CancelToken
from app.core.chat.model_messages import build_messages
from app.core.engine.events import GenerationEvent
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.token_ids import common_prefix_length
from app.core.trim.degenerate import degenerate_reason
from app.core.trim.extractive import HEADER, extractive_summary

SUMMARY_REQUEST = (
    "Summarise our conversation so far, except the last {kept} messages, in at most "
    "{words} words. Keep names, numbers, decisions, code identifiers and open questions. "
    "Reply with the summary only."
)


@dataclass(frozen=True)
class TrimOutcome:
    """What a trim did.

    Attributes:
        summary: The new summary text (folding any earlier one).
        summary_tokens: Its tokens.
        summary_method: ``model`` or ``extractive``.
        cache_method: ``splice``, ``rebuild`` or ``none`` (no live cache to change).
        note: Why a fallback happened, or empty.
        dropped_messages: Messages newly covered by the summary.
        summary_ms: Time to write the summary.
        cache_ms: Time to splice or rebuild the cache.
        computed_tokens: Tokens run through the model to fix the cache.
        context_tokens: Tokens the cache holds afterwards.
    """

    summary: str
    summary_tokens: int
    summary_method: str
    cache_method: str
    note: str
    dropped_messages: int
    summary_ms: float
    cache_ms: float
    computed_tokens: int
    context_tokens: int

    @property
    def total_ms(self) -> float:
        """Summary plus cache time."""
        return self.summary_ms + self.cache_ms


class Trimmer:
    """Applies trims for one conversation.

    Args:
        engine: The engine (thread-safe API).
        cache_key: The conversation's cache key.
        kv: KV precision of the conversation.
        style: How summaries are placed (see `model_messages.build_messages`).
        position_room: Tokens the conversation may still add after a trim (its
            limit); splicing stops before positions could pass the trained context.
        cancel: The turn's cancel token: a model summary stops with it (and an
            extractive one is used instead of the cut-off text).
    """

    def __init__(
        self,
        engine,
        cache_key: str,
        kv: KVSettings,
        style: str,
        position_room: int = 0,
        cancel: CancelToken | None = None,
    ):
        self.engine = engine
        self.cache_key = cache_key
        self.kv = kv
        self.style = style
        self.position_room = position_room
        self.cancel = cancel if cancel is not None else CancelToken()

    def write_summary(
        self,
        mode: str,
        max_tokens: int,
        old_messages: list[dict],
        dropped: list[tuple[str, str]],
        kept_count: int,
        previous_summary: str,
    ) -> tuple[str, str, str]:
        """Return (summary text, method used, note on any fallback)."""
        note = ""
        if mode == "model":
            try:
                text = self._model_summary(max_tokens, old_messages, kept_count)
                if self.cancel.cancelled:
                    note = (
                        "the model's summary was stopped, so an extractive one was used"
                    )
                else:
                    sources = [content for _, content in dropped]
                    reason = degenerate_reason(text, [*sources, previous_summary])
                    if not reason:
                        return f"{HEADER}\n{text.strip()}", "model", ""
                    note = (
                        f"the model's summary was unusable ({reason}), so an "
                        "extractive one was used"
                    )
            except Exception as exc:  # any failure falls back; the chat must go on
                note = f"the model summary failed ({exc}); an extractive one was used"
        text = extractive_summary(
            dropped,
            max_tokens,
            self.engine.count_tokens,
            previous_summary=previous_summary,
            cancel=self.cancel,
        )
        return text, "extractive", note

    def _model_summary(
        self, max_tokens: int, old_messages: list[dict], kept: int
    ) -> str:
        request = SUMMARY_REQUEST.format(kept=kept, words=int(max_tokens * 0.7))
        messages = [*old_messages, {"role": "user", "content": request}]
        prompt = self.engine.render(messages)
        sampling = SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=max_tokens)
        handle = self.engine.side_generate(
            self.cache_key, prompt, self.kv, sampling, cancel=self.cancel
        )
        # A reasoning model's thoughts about the summary are not the summary.
        return "".join(
            e.text
            for e in handle
            if isinstance(e, GenerationEvent) and e.channel == "answer"
        )

    def fix_cache(
        self,
        method: str,
        old_messages: list[dict],
        first_kept_index: int,
        new_messages: list[dict],
        head_count: int,
    ) -> tuple[str, str, int, int]:
        """Make the live cache hold ``new_messages``; return (method, note, computed, held).

        Args:
            method: ``splice`` or ``rebuild``.
            old_messages: The messages the cache was built from.
            first_kept_index: Index in ``old_messages`` of the first kept message.
            new_messages: System prompt + summary + kept messages.
            head_count: How many of ``new_messages`` precede the kept ones.
        """
        from app.core.engine.cache.conversation_cache import SpliceUnsupported

        cached = self.engine.cached_token_ids(self.cache_key)
        if not cached:
            return "none", "", 0, 0
        note = ""
        if method == "splice" and self._positions_exhausted():
            method = "rebuild"
            note = (
                "rotary positions neared the model's trained context after earlier "
                "splices; rebuilt to start them again"
            )
        if method == "splice":
            head_ids = self.engine.render(
                new_messages[:head_count], add_generation_prompt=False
            )
            keep = common_prefix_length(cached, head_ids)
            if first_kept_index >= len(old_messages):
                # Nothing is kept: everything after the first `keep` entries goes, so
                # the result is `head_ids` whatever the cache held there. Its tokens
                # need not match a fresh rendering (the head ends with the closing
                # tokens of the last reply, which the cache lacks, and a reply cut
                # inside a character does not encode back to the same ids).
                drop_until = len(cached)
                aligned = True
            else:
                drop_until, aligned = self._kept_start(
                    cached, old_messages, new_messages, len(head_ids)
                )
            if not aligned:
                note = "the cache did not line up with the stored messages; rebuilt instead"
            elif keep == 0:
                note = (
                    "nothing at the start of the cache could be kept; rebuilt instead"
                )
            else:
                try:
                    report = self.engine.splice(
                        self.cache_key,
                        min(keep, drop_until),
                        drop_until,
                        head_ids[min(keep, drop_until) :],
                    )
                    return "splice", "", report.computed_tokens, report.context_tokens
                except SpliceUnsupported as exc:
                    note = f"splice not possible ({exc}); rebuilt instead"
        ids = self.engine.render(new_messages, add_generation_prompt=False)
        # A rebuild is exact: anything a splice moved is computed again.
        report = self.engine.prefill(self.cache_key, ids, self.kv, exact=True)
        return "rebuild", note, report.computed_tokens, report.context_tokens

    def _kept_start(
        self,
        cached: list[int],
        old_messages: list[dict],
        new_messages: list[dict],
        head_tokens: int,
    ) -> tuple[int, bool]:
        """Where the kept messages start in the cache, and whether the cache holds
        the old rendering up to there.

        The kept messages are where the old and the new rendering end alike. Not
        ``len(render(dropped head))``: a reasoning template (Qwen3's) gives the reply
        that ends a rendering an empty thinking block, which that reply lacks once
        more turns follow, so that rendering is no prefix of the cache.
        """
        old_ids = self.engine.render(old_messages, add_generation_prompt=False)
        new_ids = self.engine.render(new_messages, add_generation_prompt=False)
        kept_ids = new_ids[head_tokens:]
        drop_until = len(old_ids) - len(kept_ids)
        aligned = (
            0 <= drop_until <= len(cached)
            and old_ids[drop_until:] == kept_ids
            and cached[:drop_until] == old_ids[:drop_until]
        )
        return drop_until, aligned

    def _positions_exhausted(self) -> bool:
        """True when splicing again could carry positions past the trained context.

        A splice keeps the rotary position running on, so after many trims it can
        approach the context the model was trained for; the turns still to come may
        add up to ``position_room`` more tokens.
        """
        trained_context = getattr(self.engine, "trained_context", None)
        trained = trained_context() if trained_context else None
        if not trained or not self.position_room:
            return False
        state = self.engine.cache_state(self.cache_key)
        return state.next_position + self.position_room > trained

    def trim(
        self,
        *,
        system_prompt: str,
        old_messages: list[dict],
        first_kept_index: int,
        dropped: list[tuple[str, str]],
        kept: list[tuple[str, str]],
        previous_summary: str,
        summary_mode: str,
        summary_max_tokens: int,
        cache_method: str,
        pinned: list[tuple[str, str]] | None = None,
    ) -> TrimOutcome:
        """Summarise the dropped part and make the cache hold the trimmed context."""
        started = time.perf_counter()
        summary, summary_method, note = self.write_summary(
            summary_mode,
            summary_max_tokens,
            old_messages,
            dropped,
            len(kept),
            previous_summary,
        )
        summary_done = time.perf_counter()
        new_messages = build_messages(
            system_prompt, [summary], kept, style=self.style, pinned=pinned or ()
        )
        head_count = len(new_messages) - len(kept)
        used, cache_note, computed, held = self.fix_cache(
            cache_method, old_messages, first_kept_index, new_messages, head_count
        )
        finished = time.perf_counter()
        return TrimOutcome(
            summary=summary,
            summary_tokens=self.engine.count_tokens(summary),
            summary_method=summary_method,
            cache_method=used,
            note="; ".join(n for n in (note, cache_note) if n),
            dropped_messages=len(dropped),
            summary_ms=(summary_done - started) * 1000,
            cache_ms=(finished - summary_done) * 1000,
            computed_tokens=computed,
            context_tokens=held,
        )
