"""The Chat Completions request as Swapless takes it: parsed and checked on entry.

Every field the server honours is validated here with a message that names the field
and what is allowed, so nothing later re-checks it; the tool and output-format fields
are checked in `openai_tools`. Fields that would change what a client gets but that
Swapless does not do (legacy ``functions``, several choices, log probabilities,
penalties) are refused rather than ignored: a client must never believe it got
something it did not. Fields that change nothing here (``user``, ``metadata``,
``store``, …) are ignored, as clients send them routinely.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from app.core.text.unicode_text import invalid_text
from app.core.turn.parts import ToolCall, ToolSpec
from app.server.errors import RequestError
from app.server.openai_chat.openai_tools import (
    check_tool_results,
    message_tool_calls,
    parse_turn_tools,
)
from app.server.openai_chat.reasoning_fields import client_reasoning, parse_effort

ROLES = ("system", "user", "assistant", "tool")
# OpenAI's newer name for the system role.
ROLE_ALIASES = {"developer": "system"}
MAX_STOP_SEQUENCES = 4
MAX_STOP_CHARS = 256
MAX_TOKENS_LIMIT = 65_536
MAX_TEMPERATURE = 2.0
MAX_SEED = 2**63 - 1


@dataclass(frozen=True)
class ChatMessage:
    """One message as the model's chat template receives it.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: Its text (text parts joined).
        reasoning_content: An assistant turn's reasoning, when the client sent it.
        tool_calls: The calls an assistant turn made.
        tool_call_id: For a ``tool`` message, the call it answers.
        name: For a ``tool`` message, the function's name.
    """

    role: str
    content: str
    reasoning_content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""

    def as_dict(self) -> dict:
        """The dict the engine renders (Hugging Face's chat-template keys)."""
        message: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning_content:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = [call.template_dict() for call in self.tool_calls]
        if self.role == "tool":
            message["tool_call_id"] = self.tool_call_id
            message["name"] = self.name
        return message


@dataclass(frozen=True)
class ChatRequest:
    """A validated chat completion request.

    Attributes:
        model: The model id the client asked for.
        messages: The whole conversation, oldest first.
        stream: Answer as server-sent events.
        include_usage: With ``stream``, send a last chunk with the usage.
        max_tokens: Reply length bound, or None for the preset's.
        temperature: Sampling temperature, or None for the preset's.
        top_p: Nucleus threshold, or None for the preset's.
        stop: Sequences that end the reply (not included in it).
        seed: Sampling seed, or None.
        tools: Functions the model may call.
        tool_choice: ``auto``, ``none``, ``required``, or the name of the one
            function it must call.
        never_trim: Refuse with the numbers instead of trimming when over the limit
            (agents compact their own history; set for every request with tools).
        parallel_tool_calls: Several calls in one reply are allowed.
        response_schema: A JSON schema the reply must validate against.
        json_object: The reply must be one JSON object.
        reasoning_effort: OpenAI's ``reasoning_effort`` (``none`` … ``high``), or
            None for the preset's thinking settings.
    """

    model: str
    messages: tuple[ChatMessage, ...]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: str = "auto"
    never_trim: bool = False
    reasoning_effort: str | None = None
    parallel_tool_calls: bool = True
    response_schema: dict | None = None
    json_object: bool = False


MAX_BODY_DEPTH = 64
"""Real requests nest a few levels; Python's parser recurses once per level."""
MAX_INT_DIGITS = 40
"""Longer integers are read as floats (infinite beyond float range), so every field's
own range check refuses them by name instead of the parser or a conversion failing."""


def parse_json_body(body: bytes) -> dict:
    """Decode a request body that must be one JSON object.

    Raises:
        RequestError: Not UTF-8, nested too deeply, not JSON, not an object, or a
            string holds a lone surrogate (the message names the field).
    """
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(
            f"The request body is not UTF-8 text: byte 0x{body[exc.start]:02x} at "
            f"offset {exc.start}.",
            code="invalid_json",
        ) from None
    try:
        data = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise RequestError(_TOO_DEEP, code="invalid_json") from None
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise RequestError(
                f"The request body is not usable JSON: {exc}.", code="invalid_json"
            ) from None
        raise RequestError(
            f"The request body is not valid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}.",
            code="invalid_json",
        ) from None
    if not isinstance(data, dict):
        raise RequestError(
            f"The request body must be a JSON object, got {type(data).__name__}.",
            code="invalid_json",
        )
    _check_tree(data)
    return data


_TOO_DEEP = f"The request body is nested too deeply; at most {MAX_BODY_DEPTH} levels are accepted."


def _bounded_int(digits: str) -> int | float:
    return int(digits) if len(digits) <= MAX_INT_DIGITS else float(digits)


def _check_tree(data: dict) -> None:
    """Refuse nesting past `MAX_BODY_DEPTH` and strings that cannot be encoded.

    Iterative, so no depth the parser accepted can exhaust the stack here or in the
    code that reads the request later. A JSON escape of half a surrogate pair
    (``\\ud800``) decodes to a string no tokenizer can encode; it failed later as
    a chat-template error, so it is refused here with the field's name.
    """
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            fault = invalid_text(value)
            if fault is not None:
                raise RequestError(
                    f"'{where}' is not valid Unicode text: {fault}.", param=where
                )
            continue
        if depth >= MAX_BODY_DEPTH and isinstance(value, dict | list):
            field = re.split(r"[.\[]", where, maxsplit=1)[0]  # the top-level field
            raise RequestError(_TOO_DEEP, code="invalid_json", param=field or None)
        if isinstance(value, dict):
            for key, item in value.items():
                stack.append((key, where or "(a key)", depth))
                stack.append((item, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(value, list):
            stack.extend(
                (item, f"{where}[{index}]", depth + 1)
                for index, item in enumerate(value)
            )


def parse_chat_request(body: bytes) -> ChatRequest:
    """Parse and check a ``POST /v1/chat/completions`` body.

    Raises:
        RequestError: Naming the field and what is allowed.
    """
    data = parse_json_body(body)
    _refuse_unsupported(data)
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(
            "'model' is required: the id of the served model (GET /v1/models lists it).",
            code="missing_required_parameter" if model is None else "invalid_type",
            param="model",
        )
    stream = _optional_bool(data, "stream", False)
    include_usage = False
    options = data.get("stream_options")
    if options is not None:
        if not stream:
            raise RequestError(
                "'stream_options' is only allowed when 'stream' is true.",
                param="stream_options",
            )
        if not isinstance(options, dict):
            raise RequestError(
                "'stream_options' must be an object.", param="stream_options"
            )
        include_usage = _optional_bool(options, "include_usage", False)
    return ChatRequest(
        reasoning_effort=parse_effort(data),
        model=model,
        messages=check_tool_results(_messages(data.get("messages"))),
        stream=stream,
        include_usage=include_usage,
        max_tokens=_max_tokens(data),
        temperature=_number(data, "temperature", 0.0, MAX_TEMPERATURE),
        top_p=_top_p(data),
        stop=_stop(data.get("stop")),
        seed=_seed(data.get("seed")),
        **parse_turn_tools(data),
    )


def _refuse_unsupported(data: dict) -> None:
    n = data.get("n")
    if n is not None and n != 1:
        raise RequestError(
            f"'n' must be 1: Swapless returns one choice per request, got {n!r}.",
            param="n",
        )
    if data.get("logprobs") not in (None, False) or data.get("top_logprobs") not in (
        None,
        0,
    ):
        raise RequestError(
            "Log probabilities are not supported; leave out 'logprobs'.",
            param="logprobs",
        )
    for name in ("functions", "function_call"):
        if data.get(name):
            raise RequestError(
                f"The legacy '{name}' field is not supported; send 'tools' and "
                "'tool_choice' instead.",
                param=name,
            )
    for name in ("frequency_penalty", "presence_penalty"):
        value = data.get(name)
        if value is not None and value != 0:
            raise RequestError(
                f"'{name}' is not supported; leave it out or set it to 0.", param=name
            )
    if data.get("logit_bias"):
        raise RequestError("'logit_bias' is not supported.", param="logit_bias")


def _optional_bool(data: dict, name: str, default: bool) -> bool:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(
            f"'{name}' must be true or false, got {value!r}.",
            code="invalid_type",
            param=name,
        )
    return value


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def _number(data: dict, name: str, low: float, high: float) -> float | None:
    value = data.get(name)
    if value is None:
        return None
    if not _is_number(value) or not low <= value <= high:
        raise RequestError(
            f"'{name}' must be a number from {low:g} to {high:g}, got {value!r}.",
            param=name,
        )
    return float(value)


def _top_p(data: dict) -> float | None:
    value = data.get("top_p")
    if value is None:
        return None
    if not _is_number(value) or not 0 < value <= 1:
        raise RequestError(
            f"'top_p' must be a number above 0 and at most 1, got {value!r}.",
            param="top_p",
        )
    return float(value)


def _whole(value: Any, name: str, low: int, high: int) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not low <= value <= high
    ):
        raise RequestError(
            f"'{name}' must be a whole number from {low} to {high}, got {value!r}.",
            param=name,
        )
    return value


def _max_tokens(data: dict) -> int | None:
    found = {
        name: _whole(data[name], name, 1, MAX_TOKENS_LIMIT)
        for name in ("max_completion_tokens", "max_tokens")
        if data.get(name) is not None
    }
    if len(set(found.values())) > 1:
        raise RequestError(
            "'max_tokens' and 'max_completion_tokens' disagree "
            f"({found['max_tokens']} vs {found['max_completion_tokens']}); send one.",
            param="max_tokens",
        )
    return next(iter(found.values()), None)


def _seed(value: Any) -> int | None:
    if value is None:
        return None
    return _whole(value, "seed", 0, MAX_SEED)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise RequestError(
            "'stop' must be a string or a list of strings.", param="stop"
        )
    if len(stops) > MAX_STOP_SEQUENCES:
        raise RequestError(
            f"'stop' may hold at most {MAX_STOP_SEQUENCES} sequences, got {len(stops)}.",
            param="stop",
        )
    for stop in stops:
        if not stop or len(stop) > MAX_STOP_CHARS:
            raise RequestError(
                f"Each 'stop' sequence must be 1 to {MAX_STOP_CHARS} characters long.",
                param="stop",
            )
    return tuple(stops)


def _messages(value: Any) -> tuple[ChatMessage, ...]:
    if value is None:
        raise RequestError(
            "'messages' is required: a list of {role, content} objects.",
            code="missing_required_parameter",
            param="messages",
        )
    if not isinstance(value, list) or not value:
        raise RequestError(
            "'messages' must be a non-empty list of {role, content} objects.",
            param="messages",
        )
    return tuple(_message(item, index) for index, item in enumerate(value))


def _message(item: Any, index: int) -> ChatMessage:
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise RequestError(f"'{where}' must be an object.", param=where)
    role = item.get("role")
    # A non-string role (a list is unhashable) is refused below, not looked up.
    if isinstance(role, str):
        role = ROLE_ALIASES.get(role, role)
    if role == "function" or item.get("function_call"):
        raise RequestError(
            f"'{where}': legacy function messages are not supported; use 'tool' "
            "messages and 'tool_calls'.",
            param=where,
        )
    if role not in ROLES:
        raise RequestError(
            f"'{where}.role' must be one of system, developer, user, assistant, tool; "
            f"got {role!r}.",
            param=f"{where}.role",
        )
    content = _content(item.get("content"), role, where)
    if role == "tool":
        ident = item.get("tool_call_id")
        if not isinstance(ident, str) or not ident:
            raise RequestError(
                f"'{where}.tool_call_id' is required: the id of the call answered.",
                param=f"{where}.tool_call_id",
            )
        return ChatMessage(role, content, tool_call_id=ident)
    if role != "assistant":
        return ChatMessage(role, content)
    calls = message_tool_calls(item, where)
    reasoning, content = client_reasoning(item, content, where)
    return ChatMessage(role, content, reasoning_content=reasoning, tool_calls=calls)


def _content(content: Any, role: str, where: str) -> str:
    if isinstance(content, str):
        return content
    if content is None and role == "assistant":
        return ""
    if isinstance(content, list):
        texts = []
        for number, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise RequestError(
                    f"'{where}.content[{number}]': only text parts are supported "
                    f"(type 'text' with a 'text' string), got {kind or part!r}.",
                    param=f"{where}.content",
                )
            texts.append(part["text"])
        return "".join(texts)
    raise RequestError(
        f"'{where}.content' must be a string or a list of text parts.",
        param=f"{where}.content",
    )
