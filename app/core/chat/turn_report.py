"""The per-turn report the CLI prints as JSON and the UI shows under a reply."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from app.core.store.records import RecalledMessage, ReplyStats


def conversation_cache_key(conversation_id: int) -> str:
    """The engine cache key of a stored conversation (chat turns and documents share it)."""
    return f"conversation-{conversation_id}"


def reply_stats(final) -> ReplyStats:
    """The stats stored with a reply, from the turn's final `GenerationEvent`."""
    return ReplyStats(
        prompt_tokens=final.prompt_tokens,
        generated_tokens=final.generated_tokens,
        reused_tokens=final.reused_tokens,
        ttft_s=final.ttft_s,
        tokens_per_s=final.tokens_per_s,
        peak_memory_bytes=final.peak_memory_bytes,
        kv_bits=final.kv_bits,
        reasoning_tokens=final.reasoning_tokens or None,
        reasoning_s=final.reasoning_s if final.reasoning_tokens else None,
    )


@dataclass(frozen=True)
class TurnReport:
    """Everything measured about one turn.

    Attributes:
        reply: The assistant's reply text.
        prompt_tokens: Tokens of the whole prompt.
        reused_tokens: Prompt tokens served from a cache.
        reuse_source: ``none``, ``memory`` or ``disk``.
        new_tokens: Prompt tokens that were prefilled.
        generated_tokens: Tokens generated (EOS included when it ended the reply).
        context_tokens: Tokens the KV cache holds after the turn.
        kv_bytes: Bytes the KV cache holds after the turn.
        kv_bits: KV precision of the stored entries.
        ttft_s: Seconds to the first token.
        prefill_s: Seconds spent prefilling.
        tokens_per_s: Decode speed.
        peak_memory_bytes: MLX peak memory during the turn.
        finish_reason: ``stop``, ``length`` or ``cancelled``.
        conversation_id: The stored conversation, when a store is used.
        message_id: The stored reply, when a store is used.
        effective_max_context: The limit in force (preset and device, whichever is
            smaller).
        preset_max_context: The preset's own limit.
        trimmed: Whether this turn trimmed the conversation first.
        trim_ms: Time of the trim (summary + cache).
        trim_cache_ms: Time spent splicing or rebuilding the cache.
        trim_method: ``splice``, ``rebuild`` or ``none``.
        summary_tokens: Tokens of the summary written by the trim.
        summary_method: ``model`` or ``extractive``.
        trim_note: Why a fallback happened during the trim, if one did.
        kv_layers: Which cache entries are at which precision (`LayerGroup`s: full
            attention quantized, sliding windows and recurrent state not).
        checkpoint_bytes: Bytes of the state checkpoints kept for turn reuse.
        recalled: Trimmed originals put back before the user message (recall).
        recall_cut: Whether a recalled message was cut to fit the recall budget.
        recall_ms: Time recall took.
        reasoning: A reasoning model's thoughts (empty for others).
        reasoning_tokens: Tokens of reasoning (markers included).
        reasoning_s: Seconds spent reasoning.
        reasoning_truncated: The reply hit ``max_tokens`` inside its reasoning, so
            it has no answer.
        reasoning_forced_end: The thinking budget ended the reasoning.
        reasoning_cut_tokens: Cache entries of the reasoning cut out after the
            reply (so the cache equals the template's rendering of the history).
        reasoning_cut_method: ``splice``, ``none`` (nothing to cut), ``truncate``
            (the cache could not splice: the next turn re-prefills the answer) or
            empty when the model does not reason.
        reasoning_cut_note: Why the fallback was used, if it was.
        reasoning_cut_ms: Time the cut took (finding the span and splicing).
        tool_calls: Tool calls made this turn (their replies are stored before
            ``message_id``'s).
    """

    reply: str
    prompt_tokens: int
    reused_tokens: int
    reuse_source: str
    new_tokens: int
    generated_tokens: int
    context_tokens: int
    kv_bytes: int
    kv_bits: int
    ttft_s: float
    prefill_s: float
    tokens_per_s: float
    peak_memory_bytes: int
    finish_reason: str
    conversation_id: int | None = None
    message_id: int | None = None
    effective_max_context: int | None = None
    preset_max_context: int | None = None
    trimmed: bool = False
    trim_ms: float = 0.0
    trim_cache_ms: float = 0.0
    trim_method: str = ""
    summary_tokens: int = 0
    summary_method: str = ""
    trim_note: str = ""
    kv_layers: tuple = ()
    checkpoint_bytes: int = 0
    recalled: tuple[RecalledMessage, ...] = ()
    recall_cut: bool = False
    recall_ms: float = 0.0
    reasoning: str = ""
    reasoning_tokens: int = 0
    reasoning_s: float = 0.0
    reasoning_truncated: bool = False
    reasoning_forced_end: bool = False
    reasoning_cut_tokens: int = 0
    reasoning_cut_method: str = ""
    reasoning_cut_note: str = ""
    reasoning_cut_ms: float = 0.0
    tool_calls: int = 0

    @classmethod
    def from_final(cls, final, *, reply: str, **context) -> TurnReport:
        """The report of a turn from its final `GenerationEvent`.

        Args:
            final: The turn's last event.
            reply: The whole reply text.
            **context: The store and limit fields (``conversation_id``,
                ``message_id``, ``effective_max_context``, ``preset_max_context``).
        """
        return cls(
            reply=reply,
            prompt_tokens=final.prompt_tokens,
            reused_tokens=final.reused_tokens,
            reuse_source=final.reuse_source,
            new_tokens=final.new_tokens,
            generated_tokens=final.generated_tokens,
            context_tokens=final.context_tokens,
            kv_bytes=final.kv_bytes,
            kv_bits=final.kv_bits,
            ttft_s=final.ttft_s,
            prefill_s=final.prefill_s,
            tokens_per_s=final.tokens_per_s,
            peak_memory_bytes=final.peak_memory_bytes,
            finish_reason=final.finish_reason or "stop",
            kv_layers=final.kv_layers,
            checkpoint_bytes=final.checkpoint_bytes,
            reasoning_tokens=final.reasoning_tokens,
            reasoning_s=final.reasoning_s,
            reasoning_truncated=(
                final.finish_reason == "length" and final.channel == "reasoning"
            ),
            reasoning_forced_end=final.reasoning_forced_end,
            **context,
        )

    def to_json(self) -> dict:
        """Return the report as a JSON-ready dict with rounded timings."""
        data = asdict(self)
        keys = ("ttft_s", "prefill_s", "tokens_per_s", "trim_ms", "trim_cache_ms")
        for key in (*keys, "recall_ms", "reasoning_s"):
            data[key] = round(data[key], 4)
        data["recalled"] = [r.to_json() for r in self.recalled]
        return data
