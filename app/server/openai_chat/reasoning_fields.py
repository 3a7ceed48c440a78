"""Reasoning in the OpenAI protocol: what clients send back, and what they may ask.

Replies carry a reasoning model's thoughts in ``reasoning_content`` (`openai_response`).
Clients send an earlier assistant message back with its thoughts in
``reasoning_content`` (llama.cpp, LM Studio, DeepSeek), ``reasoning`` (mlx-lm's server,
OpenRouter) or as ``<think>…</think>`` at the start of ``content`` (clients that never
split it); all three are understood and given to the template as
``reasoning_content``. A request may set OpenAI's ``reasoning_effort``: ``none`` or
``minimal`` turn thinking off, ``low`` / ``medium`` / ``high`` set a harmony model's
effort.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.core.reasoning.thinking import ThinkingSettings
from app.server.errors import RequestError

THINK_START = "<think>"
THINK_END = "</think>"
EFFORTS = ("none", "minimal", "low", "medium", "high")


def client_reasoning(item: dict, content: str, where: str) -> tuple[str, str]:
    """An assistant message's reasoning and answer, however the client sent them.

    Returns:
        ``(reasoning, content)``; the reasoning is empty when there is none.

    Raises:
        RequestError: A reasoning field that is not text.
    """
    for name in ("reasoning_content", "reasoning"):
        value = item.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise RequestError(
                f"'{where}.{name}' must be a string.", param=f"{where}.{name}"
            )
        if value:
            return value, content
    stripped = content.lstrip()
    if stripped.startswith(THINK_START) and THINK_END in stripped:
        thought, _, answer = stripped[len(THINK_START) :].partition(THINK_END)
        return thought.strip("\n"), answer.lstrip("\n")
    return "", content


def request_thinking(base: ThinkingSettings, request: Any) -> ThinkingSettings:
    """The preset's thinking settings with the request's ``reasoning_effort`` applied."""
    effort = getattr(request, "reasoning_effort", None)
    if effort is None:
        return base
    if effort in ("none", "minimal"):
        return replace(base, enabled=False)
    return replace(base, enabled=True, effort=effort)


def parse_effort(data: dict) -> str | None:
    """The request's ``reasoning_effort`` (None when absent).

    Raises:
        RequestError: A value OpenAI's API does not define.
    """
    value = data.get("reasoning_effort")
    if value is None:
        return None
    if value not in EFFORTS:
        raise RequestError(
            f"'reasoning_effort' must be one of {', '.join(EFFORTS)}; got {value!r}.",
            param="reasoning_effort",
        )
    return value


def ignored_reasoning_note(messages: Any, model_reasons: bool) -> dict[str, str]:
    """The ``swapless`` object's note when a client sends reasoning to a model without.

    The reasoning is not given to such a model (its template has no place for it), so
    it is ignored, and the reply says so rather than dropping it silently.

    Args:
        messages: The request's `ChatMessage`s.
        model_reasons: Whether the served model writes reasoning.

    Returns:
        ``{"reasoning_note": ...}``, or nothing when there is nothing to say.
    """
    if model_reasons:
        return {}
    count = sum(1 for m in messages if getattr(m, "reasoning_content", ""))
    if not count:
        return {}
    noun = "message" if count == 1 else "messages"
    return {
        "reasoning_note": f"reasoning sent with {count} assistant {noun} was ignored: "
        "this model does not reason"
    }
