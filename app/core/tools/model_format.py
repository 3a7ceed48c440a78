"""How the loaded model writes tool calls, read from its tokenizer (duck-typed).

mlx-lm's ``TokenizerWrapper`` infers a tool parser and the call markers from the chat
template and vocabulary (``tool_parser``, ``tool_call_start``, ``tool_call_end``);
Swapless keeps no per-model rules of its own. Nothing here imports mlx-lm: the
wrapper is passed in, so these functions run on any thread.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from app.core.tools.call_stream import CallFormat
from app.core.tools.grammar import Marker
from app.core.tools.harmony import harmony_format


def _parse_json_call(text: str, tools: Any = None) -> Any:
    return json.loads(text.strip())


# For a template without tool support the server writes the tools into the system
# turn the Qwen3 way (`app.server.service.tool_prompt`), so calls are read that way too.
GENERIC_FORMAT = CallFormat(
    "json_tools", "<tool_call>", "</tool_call>", _parse_json_call
)


def call_format_or_generic(tokenizer: Any) -> CallFormat:
    """The model's call format, or the generic Qwen3-style one it was told to use."""
    return call_format(tokenizer) or GENERIC_FORMAT


def call_format(tokenizer: Any) -> CallFormat | None:
    """How the loaded model writes tool calls, or None if its template has none."""
    parse = getattr(tokenizer, "tool_parser", None)
    start = getattr(tokenizer, "tool_call_start", None)
    end = getattr(tokenizer, "tool_call_end", None)
    # An empty end marker is a format of its own (mistral's calls end with the reply).
    if parse is None or not start or end is None:
        # gpt-oss: mlx-lm has no parser for harmony's commentary-channel calls.
        get_vocab = getattr(tokenizer, "get_vocab", None)
        return harmony_format(get_vocab()) if callable(get_vocab) else None
    name = getattr(parse, "__module__", "").rsplit(".", 1)[-1]
    return CallFormat(name=name, start=start, end=end, parse=parse)


def supports_tools(tokenizer: Any) -> bool:
    """True when the template renders tools and mlx-lm knows how calls are written."""
    template = getattr(tokenizer, "chat_template", None)
    return (
        call_format(tokenizer) is not None
        and isinstance(template, str)
        and "tools" in template
    )


def marker(tokenizer: Any, text: str) -> Marker:
    """``text`` as a grammar marker: its token when it is one special token."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    if len(ids) == 1 and (ids[0] in special or ids[0] in added):
        return Marker(text, ids[0])
    return Marker(text)


def stable_prefix_length(
    render: Callable[[list[dict], bool], list[int]],
    messages: Sequence[dict],
    prompt_ids: list[int],
) -> int:
    """Tokens at the start of the prompt that every request with the same system
    prompt and tools shares (the tool definitions included), for the prefix cache.

    Found as the common prefix of the prompt and of the same head followed by a
    different user message, so it works whatever the template puts where.

    Args:
        render: Renders messages with this turn's tools (``render(messages,
            add_generation_prompt)``).
        messages: The turn's messages.
        prompt_ids: The turn's rendered prompt.
    """
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    probes = [
        [*messages[:head], {"role": "user", "content": text}] for text in ("a", "b")
    ]
    first, second = (render(p, False) for p in probes)
    same = 0
    for x, y, z in zip(first, second, prompt_ids, strict=False):
        if not x == y == z:
            break
        same += 1
    return same
