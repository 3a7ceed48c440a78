"""The Messages request as Swapless takes it: parsed and checked on entry.

Content blocks become the chat-template messages every model reads: ``tool_use`` blocks
an assistant turn's ``tool_calls``, ``tool_result`` blocks ``tool`` messages (their ids
must answer a call made earlier), ``thinking`` blocks its ``reasoning_content``.
Fields that change nothing here (``metadata``, ``cache_control``, ``service_tier``,
``context_management``, …) are accepted; fields Swapless cannot honour are refused by
name. Agents compact their own history: these requests are never trimmed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core.turn.parts import ToolCall, ToolSpec
from app.server.errors import RequestError
from app.server.openai_chat.openai_request import (
    MAX_STOP_CHARS,
    MAX_TOKENS_LIMIT,
    ChatMessage,
    ChatRequest,
    parse_json_body,
)

# A long agent session holds a few thousand blocks; more is an abuse of the parser.
MAX_BLOCKS = 5000
MAX_STOP_SEQUENCES = 16
MAX_TOOLS = 256
# Refused by name: each would change the reply in a way Swapless does not do.
UNSUPPORTED = {
    "top_k": "top-k sampling is not supported; leave out 'top_k'.",
    "mcp_servers": "remote MCP servers are not supported; leave out 'mcp_servers'.",
    "container": "code-execution containers are not supported; leave out 'container'.",
}


@dataclass(frozen=True)
class MessagesRequest:
    """A validated Messages request.

    Attributes:
        chat: The neutral request the service answers.
        stream: Answer as server-sent events.
        thinking: The client asked for extended thinking.
    """

    chat: ChatRequest
    stream: bool
    thinking: bool


def _fail(message: str, param: str | None = None) -> RequestError:
    return RequestError(message, param=param)


def parse_messages_request(body: bytes, *, count_only: bool = False) -> MessagesRequest:
    """Parse and check a ``POST /v1/messages`` (or ``count_tokens``) body.

    Args:
        body: The raw body.
        count_only: For ``count_tokens``: ``max_tokens`` is not required.

    Raises:
        RequestError: Naming the field and what is allowed.
    """
    data = parse_json_body(body)
    for name, message in UNSUPPORTED.items():
        if data.get(name) not in (None, [], {}):
            raise _fail(message, name)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _fail("model: Field required (the id of the served model).", "model")
    max_tokens = data.get("max_tokens")
    if max_tokens is None and not count_only:
        raise _fail("max_tokens: Field required.", "max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise _fail(
            f"max_tokens: must be a whole number from 1 to {MAX_TOKENS_LIMIT}, got "
            f"{max_tokens!r}.",
            "max_tokens",
        )
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("stream: must be true or false.", "stream")
    tools = _tools(data.get("tools"))
    counter = [0]
    system = _system(data.get("system"), counter)
    messages = _messages(data.get("messages"), counter)
    thinking = data.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        raise _fail("thinking: must be an object.", "thinking")
    chat = ChatRequest(
        model=model,
        messages=(*system, *messages),
        stream=stream,
        max_tokens=max_tokens,
        temperature=_number(data, "temperature", 0.0, 1.0),
        top_p=_top_p(data.get("top_p")),
        stop=_stops(data.get("stop_sequences")),
        tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), tools),
        never_trim=True,
    )
    return MessagesRequest(
        chat=chat,
        stream=stream,
        thinking=thinking is not None
        and thinking.get("type") in ("enabled", "adaptive"),
    )


def _number(data: dict, name: str, low: float, high: float) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(f"{name}: must be a number.", name)
    if not low <= value <= high:
        raise _fail(f"{name}: must be from {low:g} to {high:g}, got {value!r}.", name)
    return float(value)


def _top_p(value: Any) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= 1
    ):
        raise _fail(f"top_p: must be above 0 and at most 1, got {value!r}.", "top_p")
    return float(value)


def _stops(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
        raise _fail(
            "stop_sequences: must be a list of non-empty strings.", "stop_sequences"
        )
    if len(value) > MAX_STOP_SEQUENCES or any(len(s) > MAX_STOP_CHARS for s in value):
        raise _fail(
            f"stop_sequences: at most {MAX_STOP_SEQUENCES} sequences of at most "
            f"{MAX_STOP_CHARS} characters.",
            "stop_sequences",
        )
    return tuple(value)


def _tools(value: Any) -> tuple[ToolSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise _fail(f"tools: must be a list of at most {MAX_TOOLS} tools.", "tools")
    tools = []
    for index, tool in enumerate(value):
        where = f"tools.{index}"
        if not isinstance(tool, dict):
            raise _fail(f"{where}: must be an object.", where)
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise _fail(
                f"{where}: server tools ({kind!r}) are not supported; only client "
                "tools with a name and an input_schema are.",
                where,
            )
        name, schema = tool.get("name"), tool.get("input_schema")
        if not isinstance(name, str) or not name:
            raise _fail(f"{where}.name: Field required.", f"{where}.name")
        if not isinstance(schema, dict):
            raise _fail(
                f"{where}.input_schema: must be a JSON schema object.",
                f"{where}.input_schema",
            )
        description = tool.get("description") or ""
        if not isinstance(description, str):
            raise _fail(f"{where}.description: must be a string.", where)
        tools.append(ToolSpec(name=name, description=description, parameters=schema))
    return tuple(tools)


def _tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> str:
    if value is None:
        return "auto"
    if not isinstance(value, dict):
        raise _fail("tool_choice: must be an object with a 'type'.", "tool_choice")
    kind = value.get("type")
    if kind in ("auto", "none"):
        return kind
    if kind == "any":
        return "required"
    if kind == "tool":
        name = value.get("name")
        if name not in {t.name for t in tools}:
            raise _fail(
                f"tool_choice.name: {name!r} is not one of the request's tools.",
                "tool_choice",
            )
        return name
    raise _fail(
        "tool_choice.type: must be 'auto', 'any', 'tool' or 'none'.", "tool_choice"
    )


def _count(counter: list[int], blocks: int) -> None:
    counter[0] += blocks
    if counter[0] > MAX_BLOCKS:
        raise _fail(
            f"The request holds more than {MAX_BLOCKS} content blocks.", "messages"
        )


def _text_of(value: Any, where: str, counter: list[int]) -> str:
    """Text of a string or a list of text blocks (other kinds refused in words)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _fail(f"{where}: must be a string or a list of content blocks.", where)
    _count(counter, len(value))
    texts = []
    for index, block in enumerate(value):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind in ("image", "document"):
            raise _fail(
                f"{where}.{index}: {kind} blocks are not supported: the served model "
                "reads text only. Send the content as text.",
                f"{where}.{index}",
            )
        if kind != "text" or not isinstance(block.get("text"), str):
            raise _fail(
                f"{where}.{index}: expected a text block, got {kind!r}.",
                f"{where}.{index}",
            )
        texts.append(block["text"])
    return "\n\n".join(texts) if where == "system" else "".join(texts)


def _system(value: Any, counter: list[int]) -> tuple[ChatMessage, ...]:
    if value is None:
        return ()
    text = _text_of(value, "system", counter)
    return (ChatMessage("system", text),) if text else ()


def _messages(value: Any, counter: list[int]) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise _fail("messages: must be a non-empty list of messages.", "messages")
    _count(counter, len(value))
    out: list[ChatMessage] = []
    calls: dict[str, str] = {}  # tool_use id -> name, for results
    for index, message in enumerate(value):
        where = f"messages.{index}"
        if not isinstance(message, dict):
            raise _fail(f"{where}: must be an object.", where)
        role = message.get("role")
        if role == "system":
            # Claude Code's mid-conversation system messages (beta
            # mid-conversation-system): kept in place, so the cached prefix before
            # them stays valid, as a reminder in a user turn (chat templates accept
            # a system turn only first).
            text = _text_of(message.get("content"), f"{where}.content", counter)
            out.append(
                ChatMessage("user", f"<system-reminder>\n{text}\n</system-reminder>")
            )
            continue
        if role not in ("user", "assistant"):
            raise _fail(
                f"{where}.role: must be 'user', 'assistant' or 'system', got {role!r}.",
                f"{where}.role",
            )
        content = message.get("content")
        if isinstance(content, str):
            out.append(ChatMessage(role, content))
            continue
        if not isinstance(content, list):
            raise _fail(
                f"{where}.content: must be a string or a list of content blocks.",
                f"{where}.content",
            )
        _count(counter, len(content))
        if role == "assistant":
            out.append(_assistant(content, where, calls, counter))
        else:
            out.extend(_user(content, where, calls, counter))
    return tuple(out)


def _assistant(
    blocks: list, where: str, calls: dict[str, str], counter: list[int]
) -> ChatMessage:
    texts, thoughts, made = [], [], []
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
        elif kind == "redacted_thinking":
            continue  # opaque to any model but Anthropic's
        elif kind == "tool_use":
            ident, name = block.get("id"), block.get("name")
            arguments = block.get("input", {})
            if not isinstance(ident, str) or not isinstance(name, str):
                raise _fail(f"{at}: a tool_use block needs an id and a name.", at)
            if not isinstance(arguments, dict):
                raise _fail(f"{at}.input: must be an object.", at)
            calls[ident] = name
            made.append(
                ToolCall(ident, name, json.dumps(arguments, ensure_ascii=False))
            )
        else:
            raise _block_error(kind, at)
    return ChatMessage(
        "assistant",
        "".join(texts),
        reasoning_content="\n".join(thoughts),
        tool_calls=tuple(made),
    )


def _user(
    blocks: list, where: str, calls: dict[str, str], counter: list[int]
) -> list[ChatMessage]:
    results: list[ChatMessage] = []
    texts = []
    for index, block in enumerate(blocks):
        at = f"{where}.content.{index}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_result":
            ident = block.get("tool_use_id")
            if ident not in calls:
                raise _fail(
                    f"{at}: tool_result for unknown tool_use_id {ident!r}: it must "
                    "answer a tool_use block of an earlier assistant message.",
                    at,
                )
            content = block.get("content", "")
            text = _text_of(content, f"{at}.content", counter) if content else ""
            if block.get("is_error"):
                text = f"Error: {text}"
            results.append(
                ChatMessage("tool", text, tool_call_id=ident, name=calls[ident])
            )
        else:
            raise _block_error(kind, at)
    if texts:
        results.append(ChatMessage("user", "".join(texts)))
    return results


def _block_error(kind: Any, at: str) -> RequestError:
    if kind in ("image", "document"):
        return _fail(
            f"{at}: {kind} blocks are not supported: the served model reads text "
            "only. Send the content as text.",
            at,
        )
    return _fail(f"{at}: unsupported content block type {kind!r}.", at)
