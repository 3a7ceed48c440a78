"""A reply streamed from the engine as the server's events.

The engine's events become the server's: answer text cut at the first stop sequence
(`stop_sequences`), reasoning passed through on its channel, tool calls as their own
events, malformed calls as notes, and a final `Finished` with the ``swapless`` object
(never a silent cut: the trim, the reuse, the speed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from app.core.cancel import CancelToken
from app.core.chat.trimmer import TrimOutcome
from app.core.engine.events import GenerationEvent
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.presets.presets import Preset
from app.core.tools.call_stream import MalformedCall
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import (
    ANSWER,
    REASONING,
    ToolCall,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from app.server.events import Accepted, Finished, TextDelta
from app.server.openai_chat.client_history import ModelView
from app.server.openai_chat.openai_request import ChatRequest
from app.server.service.stop_sequences import StopScanner


def stream_reply(
    engine: Any,
    key: str,
    messages: list[dict],
    request: ChatRequest,
    sampling: SamplingSettings,
    limit: int,
    cancel: CancelToken,
    *,
    prompt_tokens: int,
    kv: KVSettings,
    accepted: bool,
    extension: dict,
    turn_tools: TurnTools | None,
    thinking: Any,
) -> Iterator:
    """Run the reply on the engine and stream it as the server's events.

    Args:
        engine: The engine.
        key: The cache the request runs on.
        messages: The messages the engine renders.
        request: The request (its stop sequences).
        sampling: Sampling settings.
        limit: The effective context limit.
        cancel: Stops the reply within a token.
        prompt_tokens: The prompt's size, for `Accepted`.
        kv: The cache's settings.
        accepted: True when `Accepted` was sent already (by a trim).
        extension: The ``swapless`` object's trim and recall part.
        turn_tools: What the engine enforces and parses (None: plain chat).
        thinking: The turn's thinking settings.

    Yields:
        `Accepted` (once), `TextDelta`s, tool-call events and `Finished`, whose text
        is cut at the first stop sequence.
    """
    if cancel.cancelled:  # the client left during the trim
        yield Finished("", "cancelled", 0, 0, 0, {**extension, "cancelled": True}, key)
        return
    extra = {"tools": turn_tools} if turn_tools is not None else {}
    handle = engine.chat(
        key,
        messages,
        kv,
        sampling,
        max_context=limit,
        cancel=cancel,
        thinking=thinking,
        **extra,
    )
    scanner = StopScanner(request.stop)
    parts: list[str] = []
    calls: list[ToolCall] = []
    notes: list[str] = []
    thoughts: list[str] = []
    try:
        for event in handle:  # a budget refusal is raised here, before any event
            if not accepted:
                accepted = True
                yield Accepted(prompt_tokens)
            if isinstance(event, ToolCallStarted | ToolCallDelta):
                yield event
                continue
            if isinstance(event, ToolCallFinished):
                calls.append(event.call)
                yield event
                continue
            if isinstance(event, MalformedCall):
                notes.append(event.reason)
                continue
            if not isinstance(event, GenerationEvent) or not event.text:
                continue
            if event.channel != ANSWER:  # reasoning: no stop sequences in it
                thoughts.append(event.text)
                yield TextDelta(event.text, event.channel)
                continue
            text = scanner.feed(event.text)
            if text:
                parts.append(text)
                yield TextDelta(text)
            if scanner.stopped and not handle.cancelled:
                handle.cancel()  # the engine stops after this token
    except BaseException:
        handle.cancel()
        raise
    tail = scanner.flush()
    if tail:
        parts.append(tail)
        yield TextDelta(tail)
    final = handle.final
    finish = "stop" if scanner.stopped else final.finish_reason
    if calls and finish == "stop":
        finish = "tool_calls"
    yield Finished(
        text="".join(parts),
        finish_reason=finish,
        prompt_tokens=final.prompt_tokens,
        completion_tokens=final.generated_tokens,
        cached_tokens=final.reused_tokens,
        key=key,
        tool_calls=tuple(calls),
        stop_sequence=scanner.matched,
        reasoning="".join(thoughts),
        swapless={
            **extension,
            **({"tool_call_notes": notes} if notes else {}),
            # OpenAI has no finish reason for this: a reply cut short because
            # the server stopped (or the client left) says so here.
            "cancelled": finish == "cancelled",
            "reused_tokens": final.reused_tokens,
            "new_tokens": final.new_tokens,
            "context_tokens": final.context_tokens,
            "kv_bytes": final.kv_bytes,
            "kv_bits": final.kv_bits,
            "ttft_s": round(final.ttft_s, 4),
            "tokens_per_s": round(final.tokens_per_s, 2),
            "reasoning_tokens": final.reasoning_tokens,
            "reasoning_truncated": (
                final.finish_reason == "length" and final.channel == REASONING
            ),
        },
    )


def trim_extension(
    outcome: TrimOutcome | None,
    view: ModelView,
    reason: str,
    limit: int,
    preset: Preset,
    pressure: str,
) -> dict:
    """The ``swapless`` object's trim and limit part: never a silent cut."""
    return {
        "trimmed": outcome is not None,
        "dropped_messages": outcome.dropped_messages if outcome else 0,
        "summarized_messages": view.summarized_messages,
        "summary_tokens": view.record.summary_tokens if view.record else 0,
        "summary_method": outcome.summary_method if outcome else None,
        "trim_method": outcome.cache_method if outcome else None,
        "trim_ms": round(outcome.total_ms, 1) if outcome else 0.0,
        "trim_note": (outcome.note or None) if outcome else None,
        "trim_reason": reason or None,
        "effective_limit": limit,
        "preset": preset.name,
        "preset_limit": preset.max_context,
        "auto_trim": preset.auto_trim,
        "memory_pressure": pressure,
    }
