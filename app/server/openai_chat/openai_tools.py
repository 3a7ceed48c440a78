"""The tool and output-format fields of a Chat Completions request, checked on entry.

``tools``, ``tool_choice``, ``parallel_tool_calls`` and ``response_format`` become the
`ChatRequest` fields every protocol fills (`app.server.service.tool_paths` makes the engine's
`TurnTools` of them); an assistant message's ``tool_calls`` and a ``tool`` message's
``tool_call_id`` are checked against each other (a result must answer a call made
earlier in the history). Every refusal is a 400 naming the field and the reason.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from app.core.tools.grammar import (
    Marker,
    check_grammar,
    json_schema_grammar,
    tool_call_grammar,
)
from app.core.tools.tool_specs import (
    ToolInputError,
    check_schema,
    parse_tool_choice,
    parse_tools,
)
from app.core.turn.parts import ToolCall
from app.server.errors import RequestError

MAX_CALLS_PER_MESSAGE = 128


def request_error(exc: ToolInputError) -> RequestError:
    """The 400 of a refused tool field."""
    return RequestError(str(exc), param=exc.field)


def parse_turn_tools(data: dict) -> dict[str, Any]:
    """The request's tool and output-format fields, as `ChatRequest` keyword arguments.

    Raises:
        RequestError: Naming the field at fault.
    """
    try:
        tools = parse_tools(data["tools"]) if data.get("tools") else ()
        choice = parse_tool_choice(data.get("tool_choice"), tools)
        parallel = data.get("parallel_tool_calls", True)
        if not isinstance(parallel, bool):
            raise ToolInputError(
                f"'parallel_tool_calls' must be true or false, got {parallel!r}.",
                "parallel_tool_calls",
            )
        schema, json_object = _response_format(data.get("response_format"))
        if choice.forces_call:
            # The call's grammar is compiled now, so a schema the library cannot
            # enforce is a 400 here, not a failure on the engine thread.
            grammar = tool_call_grammar(
                tools, choice, start=Marker("<a>"), end=Marker("</a>"), parallel=False
            )
            check_grammar(grammar, "tools")
    except ToolInputError as exc:
        raise request_error(exc) from None
    if choice.forces_call and (schema is not None or json_object):
        raise RequestError(
            "'response_format' cannot be combined with a required or named "
            "'tool_choice': the reply is a tool call.",
            param="response_format",
        )
    return {
        "tools": tools,
        "tool_choice": choice.name if choice.mode == "named" else choice.mode,
        "parallel_tool_calls": parallel,
        "response_schema": schema,
        "json_object": json_object,
    }


def _response_format(value: Any) -> tuple[dict | None, bool]:
    field = "response_format"
    if value is None:
        return None, False
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None, False
    if kind == "json_object":
        return None, True
    if kind != "json_schema":
        raise ToolInputError(
            f"'{field}.type' must be 'text', 'json_object' or 'json_schema'; got "
            f"{kind!r}.",
            f"{field}.type",
        )
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise ToolInputError(
            f"'{field}.json_schema' must be an object with 'name' and 'schema'.",
            f"{field}.json_schema",
        )
    schema = check_schema(
        spec.get("schema"), f"{field}.json_schema.schema", require_object=False
    )
    check_grammar(json_schema_grammar(schema), f"{field}.json_schema.schema")
    return schema, False


def message_tool_calls(item: dict, where: str) -> tuple[ToolCall, ...]:
    """An assistant message's ``tool_calls``, checked.

    Raises:
        RequestError: A call without an id, a function name or JSON arguments.
    """
    value = item.get("tool_calls")
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_CALLS_PER_MESSAGE:
        raise RequestError(
            f"'{where}.tool_calls' must be a list of at most "
            f"{MAX_CALLS_PER_MESSAGE} calls.",
            param=f"{where}.tool_calls",
        )
    calls = []
    for number, call in enumerate(value):
        field = f"{where}.tool_calls[{number}]"
        function = call.get("function") if isinstance(call, dict) else None
        ident = call.get("id") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(ident, str) or not ident:
            raise RequestError(
                f"'{field}' must be an object with an 'id' and a 'function'.",
                param=field,
            )
        name, arguments = function.get("name"), function.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            raise RequestError(
                f"'{field}.function.name' must be a non-empty string.",
                param=f"{field}.function.name",
            )
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        call_ = ToolCall(ident, name, arguments if isinstance(arguments, str) else "")
        try:
            call_.arguments_dict()
        except ValueError:
            raise RequestError(
                f"'{field}.function.arguments' must be a JSON object as a string.",
                param=f"{field}.function.arguments",
            ) from None
        calls.append(call_)
    return tuple(calls)


def check_tool_results(messages: tuple) -> tuple:
    """Every ``tool`` message must answer a call made earlier in the history.

    Returns:
        The messages, each tool result named after the function it answers.

    Raises:
        RequestError: Naming the message whose ``tool_call_id`` matches no call.
    """
    made: dict[str, str] = {}
    out = []
    for index, message in enumerate(messages):
        for call in message.tool_calls:
            made[call.id] = call.name
        if message.role == "tool" and message.tool_call_id not in made:
            raise RequestError(
                f"'messages[{index}].tool_call_id' is {message.tool_call_id!r}, "
                "which matches no tool call of an earlier assistant message.",
                param=f"messages[{index}].tool_call_id",
            )
        if message.role == "tool":
            message = replace(message, name=made[message.tool_call_id])
        out.append(message)
    return tuple(out)
