"""gpt-oss's harmony tool calls, which mlx-lm has no parser for.

A harmony model calls a function on its ``commentary`` channel, addressed to the
function: ``<|channel|>commentary to=functions.get_weather <|constrain|>json
<|message|>{"city": "Paris"}<|call|>`` (the recipient may also come right after the
role, before ``<|channel|>``). `CallStream` sees the text from ``to=functions.`` to
``<|call|>``; `parse_call` reads the name and the JSON after the last
``<|message|>``. ``<|call|>`` also ends generation for these models, so the reply
usually ends inside the call and the stream parses it when it closes. The channel
headers around it belong to the reasoning splitter (``analysis`` is reasoning,
``final`` the answer).
"""

from __future__ import annotations

import json
from typing import Any

from app.core.tools.call_stream import CallFormat

START = "to=functions."
END = "<|call|>"
MESSAGE = "<|message|>"
# Tokens whose presence in the vocabulary marks the harmony format.
HARMONY_TOKENS = ("<|channel|>", "<|message|>", "<|call|>")


def parse_call(text: str, tools: Any = None) -> dict[str, Any]:
    """``get_weather <|constrain|>json<|message|>{...}`` → ``{"name", "arguments"}``.

    Raises:
        ValueError: No name, no message, or arguments that are not JSON.
    """
    name = text.split("<|", 1)[0].split()[0] if text.strip() else ""
    if not name or MESSAGE not in text:
        raise ValueError("a harmony call needs a function name and a message")
    arguments = text.rsplit(MESSAGE, 1)[1].strip()
    return {"name": name, "arguments": json.loads(arguments) if arguments else {}}


def harmony_format(vocabulary: dict[str, int]) -> CallFormat | None:
    """The harmony call format when the vocabulary has its tokens, else None."""
    if all(token in vocabulary for token in HARMONY_TOKENS):
        return CallFormat(name="harmony", start=START, end=END, parse=parse_call)
    return None
