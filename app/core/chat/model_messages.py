"""Turn a stored conversation context into the chat messages a model receives.

Summaries travel as a second system message where the template allows it (ChatML,
Llama 3); a template that refuses a system message after the first gets them appended
to the system prompt instead. Either way the system prompt's tokens come first and stay
a stable prefix, which is what cache reuse and splicing rely on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.core.trim.extractive import HEADER

SEPARATE = "separate"
MERGED = "merged"
PINNED_HEADER = "Pinned messages, word for word:"


def pinned_text(pinned: Iterable[tuple[str, str]]) -> str:
    """The block of pinned trimmed messages sent after the summaries (or empty)."""
    lines = [
        f"{'User' if role == 'user' else 'Assistant'}: {content}"
        for role, content in pinned
    ]
    return "\n".join([PINNED_HEADER, *lines]) if lines else ""


def summary_text(content: str) -> str:
    """Return the text a summary is sent as (with its header, exactly once)."""
    return content if content.startswith(HEADER) else f"{HEADER}\n{content.strip()}"


def build_messages(
    system_prompt: str,
    summaries: Iterable[str],
    history: Iterable[tuple[str, str]],
    user_text: str | None = None,
    style: str = SEPARATE,
    pinned: Iterable[tuple[str, str]] = (),
) -> list[dict]:
    """Return the chat messages for a model.

    Args:
        system_prompt: The conversation's system prompt (may be empty).
        summaries: Summary texts, oldest first.
        history: ``(role, content)`` of the messages no summary covers.
        user_text: The new user message, if any.
        style: ``separate`` (summaries as their own system messages) or ``merged``
            (appended to the system prompt).
        pinned: ``(role, content)`` of pinned messages a summary covers: sent word
            for word right after the summaries.
    """
    summary_texts = [summary_text(s) for s in summaries]
    pins = pinned_text(pinned)
    if pins:
        summary_texts.append(pins)
    messages: list[dict] = []
    if style == MERGED and summary_texts:
        system = "\n\n".join(t for t in [system_prompt, *summary_texts] if t)
        messages.append({"role": "system", "content": system})
    else:
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages.extend({"role": "system", "content": t} for t in summary_texts)
    messages.extend({"role": role, "content": content} for role, content in history)
    if user_text is not None:
        messages.append({"role": "user", "content": user_text})
    return messages


def summary_style(render: Callable[[list[dict], bool], list[int]]) -> str:
    """Find out whether the chat template accepts a system message after the first.

    Args:
        render: Renders messages to token ids (``render(messages, add_generation_prompt)``).
    """
    probe = [
        {"role": "system", "content": "a"},
        {"role": "system", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    try:
        render(probe, True)
    except Exception:  # jinja raises TemplateError (or anything) for unsupported roles
        return MERGED
    return SEPARATE
