"""The Responses request as Swapless takes it: parsed and checked on entry.

The server keeps no responses, so a request must carry the whole conversation:
``previous_response_id`` is refused with a message saying so, and ``store`` is accepted
but never honoured (the response says ``"store": false``). Hosted tools (web search,
file search, computer use, …) run on OpenAI's side: they are left out of what the model
sees, so a client that offers them alongside its own function tools still works; a
request whose ``tool_choice`` names one is refused. Agents compact their own history:
these requests are never trimmed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from app.core.turn.parts import ToolCall, ToolSpec
from app.server.errors import RequestError
from app.server.openai_chat.openai_request import (
    MAX_TOKENS_LIMIT,
    ChatMessage,
    ChatRequest,
    parse_json_body,
)

MAX_ITEMS = 5000
MAX_TOOLS = 256
ROLES = {
    "user": "user",
    "assistant": "assistant",
    "system": "system",
    "developer": "system",
}
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
# A free-form ("custom") tool takes one string; the model sees it as this schema.
CUSTOM_SCHEMA = {
    "type": "object",
    "properties": {"input": {"type": "string"}},
    "required": ["input"],
}


@dataclass(frozen=True)
class ResponsesRequest:
    """A validated Responses request.

    Attributes:
        chat: The neutral request the service answers.
        stream: Answer as server-sent events.
        echo: Request fields the response object repeats (instructions, tools, …).
        custom_tools: Names of free-form tools (their calls are ``custom_tool_call``).
    """

    chat: ChatRequest
    stream: bool
    echo: dict
    custom_tools: frozenset[str] = frozenset()


def _fail(
    message: str, param: str | None = None, code: str = "invalid_value"
) -> RequestError:
    return RequestError(message, param=param, code=code)


def parse_responses_request(body: bytes) -> ResponsesRequest:
    """Parse and check a ``POST /v1/responses`` body.

    Raises:
        RequestError: Naming the field and what is allowed.
    """
    data = parse_json_body(body)
    if data.get("previous_response_id"):
        raise _fail(
            "'previous_response_id' is not supported: this server is stateless and "
            "keeps no responses. Send the whole conversation in 'input' (and "
            "'store': false).",
            "previous_response_id",
            "previous_response_not_found",
        )
    if data.get("conversation"):
        raise _fail(
            "'conversation' is not supported: this server is stateless; send the "
            "whole conversation in 'input'.",
            "conversation",
        )
    text = data.get("text")
    if isinstance(text, dict):
        kind = (text.get("format") or {}).get("type", "text")
        if kind != "text":
            raise _fail(
                "Only text replies are supported: 'text.format.type' must be 'text'.",
                "text.format",
            )
    if data.get("truncation") not in (None, "disabled"):
        raise _fail(
            "'truncation' must be 'disabled': Swapless never cuts an agent's "
            "history; over the limit it answers context_length_exceeded.",
            "truncation",
        )
    if data.get("background"):
        raise _fail("'background' responses are not supported.", "background")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _fail(
            "'model' is required: the id of the served model.",
            "model",
            "missing_required_parameter",
        )
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise _fail("'stream' must be true or false.", "stream")
    tools, custom = _tools(data.get("tools"))
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _fail("'instructions' must be a string.", "instructions")
    messages = _input(data.get("input"))
    if instructions:
        messages = (ChatMessage("system", instructions), *messages)
    messages = _merge_systems(messages)
    max_tokens = data.get("max_output_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise _fail(
            f"'max_output_tokens' must be a whole number from 1 to {MAX_TOKENS_LIMIT}.",
            "max_output_tokens",
        )
    chat = ChatRequest(
        model=model,
        messages=messages,
        stream=stream,
        max_tokens=max_tokens,
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0),
        tools=tools,
        tool_choice=_tool_choice(data.get("tool_choice"), tools),
        never_trim=True,
    )
    echo = {
        "instructions": instructions,
        "tools": data.get("tools") or [],
        "tool_choice": data.get("tool_choice") or "auto",
        "parallel_tool_calls": bool(data.get("parallel_tool_calls", True)),
        "max_output_tokens": max_tokens,
        "temperature": chat.temperature,
        "top_p": chat.top_p,
        "reasoning": data.get("reasoning") or {"effort": None, "summary": None},
        "metadata": data.get("metadata") or {},
        "prompt_cache_key": data.get("prompt_cache_key"),
    }
    return ResponsesRequest(chat, stream, echo, frozenset(custom))


def _number(data: dict, name: str, low: float, high: float) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not low <= value <= high
    ):
        raise _fail(f"'{name}' must be a number from {low:g} to {high:g}.", name)
    return float(value)


def _tools(value: Any) -> tuple[tuple[ToolSpec, ...], set[str]]:
    if value is None:
        return (), set()
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise _fail(f"'tools' must be a list of at most {MAX_TOOLS} tools.", "tools")
    tools, custom = [], set()
    for index, tool in enumerate(_flatten(value)):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            raise _fail(f"'{where}' must be an object.", where)
        kind = tool.get("type")
        if kind not in ("function", "custom"):
            continue  # a hosted tool: OpenAI runs it, the model here cannot
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(f"'{where}.name' is required.", where)
        description = tool.get("description") or ""
        if kind == "custom":
            custom.add(name)
            tools.append(ToolSpec(name, str(description), CUSTOM_SCHEMA))
            continue
        parameters = tool.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise _fail(f"'{where}.parameters' must be a JSON schema object.", where)
        tools.append(ToolSpec(name, str(description), parameters))
    return tuple(tools), custom


def _flatten(tools: list) -> list:
    """Tools with Codex's ``namespace`` groups opened: their function tools are
    offered under their own names."""
    out: list = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            inner = tool.get("tools")
            out.extend(inner if isinstance(inner, list) else [])
        else:
            out.append(tool)
    return out


def _tool_choice(value: Any, tools: tuple[ToolSpec, ...]) -> str:
    if value is None:
        return "auto"
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") in ("function", "custom"):
        name = value.get("name")
        if name not in {t.name for t in tools}:
            raise _fail(
                f"'tool_choice' names {name!r}, which is not one of the request's tools.",
                "tool_choice",
            )
        return name
    raise _fail(
        "'tool_choice' must be 'auto', 'none', 'required' or a function tool; hosted "
        "tools are not available here.",
        "tool_choice",
    )


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _fail(f"'{where}' must be a string or a list of content parts.", where)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_image", "input_file", "input_audio"):
            raise _fail(
                f"'{where}[{index}]': {kind} parts are not supported: the served "
                "model reads text only.",
                where,
            )
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise _fail(
                f"'{where}[{index}]': expected a text part, got {kind!r}.", where
            )
        texts.append(part["text"])
    return "".join(texts)


def _input(value: Any) -> tuple[ChatMessage, ...]:
    if isinstance(value, str):
        return (ChatMessage("user", value),)
    if not isinstance(value, list) or not value:
        raise _fail(
            "'input' is required: a string or a non-empty list of items.",
            "input",
            "missing_required_parameter",
        )
    if len(value) > MAX_ITEMS:
        raise _fail(f"'input' may hold at most {MAX_ITEMS} items.", "input")
    out: list[ChatMessage] = []
    calls: dict[str, str] = {}
    thoughts: list[str] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise _fail(f"'{where}' must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = ROLES.get(str(item.get("role")))
            if role is None:
                raise _fail(
                    f"'{where}.role' must be user, assistant, system or developer.",
                    where,
                )
            text = _text(item.get("content"), f"{where}.content")
            if role == "assistant":
                out.append(_assistant(out, text=text, thoughts=thoughts))
            else:
                out.append(ChatMessage(role, text))
        elif kind == "reasoning":
            parts = (item.get("content") or []) + (item.get("summary") or [])
            thoughts.append(_text(parts, f"{where}.summary") if parts else "")
        elif kind in ("function_call", "custom_tool_call"):
            ident, name = item.get("call_id"), item.get("name")
            if not isinstance(ident, str) or not isinstance(name, str):
                raise _fail(f"'{where}' needs a call_id and a name.", where)
            arguments = item.get("arguments") if kind == "function_call" else None
            if arguments is None:
                arguments = json.dumps({"input": item.get("input", "")})
            if not isinstance(arguments, str):
                raise _fail(f"'{where}.arguments' must be a JSON string.", where)
            calls[ident] = name
            call = ToolCall(ident, name, arguments)
            out.append(_assistant(out, call=call, thoughts=thoughts))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            ident = item.get("call_id")
            if ident not in calls:
                raise _fail(
                    f"'{where}': output for unknown call_id {ident!r}: it must answer "
                    "a function_call item earlier in 'input'.",
                    where,
                )
            output = item.get("output", "")
            text = (
                output if isinstance(output, str) else _text(output, f"{where}.output")
            )
            out.append(ChatMessage("tool", text, tool_call_id=ident, name=calls[ident]))
        else:
            raise _fail(f"'{where}': unsupported input item type {kind!r}.", where)
    return tuple(out)


def _assistant(
    out: list[ChatMessage],
    *,
    thoughts: list[str],
    text: str = "",
    call: ToolCall | None = None,
) -> ChatMessage:
    """A new assistant message, or the previous one extended (a reply's message and
    its calls arrive as separate items)."""
    reasoning = "\n".join(t for t in thoughts if t)
    thoughts.clear()
    calls = (call,) if call else ()
    if out and out[-1].role == "assistant" and (call or not out[-1].content):
        previous = out.pop()
        return ChatMessage(
            "assistant",
            previous.content + text,
            reasoning_content="\n".join(
                t for t in (previous.reasoning_content, reasoning) if t
            ),
            tool_calls=previous.tool_calls + calls,
        )
    return ChatMessage("assistant", text, reasoning_content=reasoning, tool_calls=calls)


def _merge_systems(messages: tuple[ChatMessage, ...]) -> tuple[ChatMessage, ...]:
    """Instructions and leading developer messages as one system turn (templates
    accept one, first)."""
    head = [m.content for m in messages if m.role == "system"]
    rest = tuple(m for m in messages if m.role != "system")
    if not head:
        return rest
    return (ChatMessage("system", "\n\n".join(h for h in head if h)), *rest)
