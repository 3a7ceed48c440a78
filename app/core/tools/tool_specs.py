"""The tools a request offers, checked on entry and bounded.

Tool definitions cost prompt tokens (often thousands) and every schema becomes a
grammar, so what a client may send is bounded here, in words that name the field:
at most `MAX_TOOLS` tools, descriptions of at most `MAX_DESCRIPTION_CHARS`, schemas
nested at most `MAX_SCHEMA_DEPTH` deep and at most `MAX_SCHEMA_BYTES` as JSON. Each
``parameters`` must be a valid JSON schema (Draft 2020-12 meta-schema) for an object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app.core.errors import InputError
from app.core.turn.parts import ToolSpec

# OpenAI's own limits: 128 functions, names of 1-64 letters, digits, '_' and '-'.
MAX_TOOLS = 128
NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# A Claude-Code-sized set has descriptions of a few KB; 1 MB ones are refused.
MAX_DESCRIPTION_CHARS = 32_768
MAX_SCHEMA_BYTES = 65_536
MAX_SCHEMA_DEPTH = 24
# All definitions together (they are rendered into every prompt).
MAX_TOOLS_JSON_BYTES = 1_048_576


class ToolInputError(InputError):
    """A tool definition, choice or schema the server refuses.

    Args:
        message: What is wrong, in words.
        field: The offending request field (``tools[3].function.parameters``).
    """

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def schema_depth(value: Any) -> int:
    """How deeply ``value`` nests objects and lists (a scalar is 0)."""
    depth = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            depth = max(depth, level + 1)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            depth = max(depth, level + 1)
            stack.extend((v, level + 1) for v in item)
    return depth


def check_schema(schema: Any, field: str, *, require_object: bool) -> dict[str, Any]:
    """Check a JSON schema's size, depth and validity.

    Args:
        schema: The schema as sent.
        field: The request field it came from, for messages.
        require_object: The schema must describe an object (tool arguments).

    Returns:
        The schema.

    Raises:
        ToolInputError: Too large, too deep, not a schema, or not an object schema.
    """
    if not isinstance(schema, dict):
        raise ToolInputError(f"'{field}' must be a JSON schema object.", field)
    depth = schema_depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise ToolInputError(
            f"'{field}' nests {depth} levels deep; at most {MAX_SCHEMA_DEPTH} are "
            "accepted.",
            field,
        )
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise ToolInputError(
            f"'{field}' is {size} bytes of JSON; at most {MAX_SCHEMA_BYTES} are "
            "accepted.",
            field,
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise ToolInputError(
            f"'{field}' is not a valid JSON schema: {exc.message}"
            + (f" (at {where})" if where else ""),
            field,
        ) from None
    kind = schema.get("type")
    if require_object and kind not in (None, "object"):
        raise ToolInputError(
            f"'{field}' must describe an object (type 'object'), got type {kind!r}.",
            field,
        )
    return schema


def parse_tools(value: Any, field: str = "tools") -> tuple[ToolSpec, ...]:
    """Parse OpenAI-style ``tools`` (``[{"type": "function", "function": {...}}]``).

    Raises:
        ToolInputError: Naming the tool and field at fault.
    """
    if not isinstance(value, list):
        raise ToolInputError(f"'{field}' must be a list of tools.", field)
    if len(value) > MAX_TOOLS:
        raise ToolInputError(
            f"'{field}' holds {len(value)} tools; at most {MAX_TOOLS} are accepted.",
            field,
        )
    total = len(json.dumps(value))
    if total > MAX_TOOLS_JSON_BYTES:
        raise ToolInputError(
            f"'{field}' is {total} bytes of JSON; at most {MAX_TOOLS_JSON_BYTES} are "
            "accepted (every definition is part of every prompt).",
            field,
        )
    specs = [_tool(item, f"{field}[{i}]") for i, item in enumerate(value)]
    names = [s.name for s in specs]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ToolInputError(
                f"'{field}[{i}].function.name': {name!r} is defined twice.",
                f"{field}[{i}].function.name",
            )
    return tuple(specs)


def _tool(item: Any, where: str) -> ToolSpec:
    if not isinstance(item, dict) or item.get("type") != "function":
        raise ToolInputError(
            f"'{where}' must be an object with type 'function'.", f"{where}.type"
        )
    function = item.get("function")
    if not isinstance(function, dict):
        raise ToolInputError(
            f"'{where}.function' must be an object.", f"{where}.function"
        )
    name = function.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ToolInputError(
            f"'{where}.function.name' must be 1 to 64 letters, digits, '_', '.' or "
            f"'-'; got {name!r}.",
            f"{where}.function.name",
        )
    description = function.get("description", "")
    if not isinstance(description, str):
        raise ToolInputError(
            f"'{where}.function.description' must be a string.",
            f"{where}.function.description",
        )
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise ToolInputError(
            f"'{where}.function.description' is {len(description)} characters; at "
            f"most {MAX_DESCRIPTION_CHARS} are accepted.",
            f"{where}.function.description",
        )
    parameters = function.get("parameters")
    if parameters is None:
        # No parameters: a function of none (`ToolSpec.arguments_schema`).
        return ToolSpec(name=name, description=description)
    check_schema(parameters, f"{where}.function.parameters", require_object=True)
    return ToolSpec(name=name, description=description, parameters=parameters)


@dataclass(frozen=True)
class ToolChoice:
    """What the caller allows: ``auto``, ``none``, ``required`` or one named function.

    Attributes:
        mode: ``auto``, ``none``, ``required`` or ``named``.
        name: The function that must be called (``named`` only).
    """

    mode: str = "auto"
    name: str = ""

    @property
    def forces_call(self) -> bool:
        """True when the reply must be a tool call (constrained decoding applies)."""
        return self.mode in ("required", "named")

    def allowed(self, tools: Sequence[ToolSpec]) -> list[ToolSpec]:
        """The tools a call may name: the named one, or all of them."""
        return [t for t in tools if self.mode != "named" or t.name == self.name]


def parse_tool_choice(
    value: Any, tools: tuple[ToolSpec, ...], field: str = "tool_choice"
) -> ToolChoice:
    """Parse OpenAI's ``tool_choice`` against the offered tools.

    Raises:
        ToolInputError: An unknown mode or function name, or a call forced with no
            tools offered.
    """
    if value is None:
        return ToolChoice("auto" if tools else "none")
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise ToolInputError(
                f"'{field}' must be 'auto', 'none', 'required' or "
                f'{{"type": "function", "function": {{"name": ...}}}}; got {value!r}.',
                field,
            )
        choice = ToolChoice(value)
    else:
        function = value.get("function") if isinstance(value, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if (
            not isinstance(value, dict)
            or value.get("type") != "function"
            or not isinstance(name, str)
        ):
            raise ToolInputError(
                f"'{field}' must be 'auto', 'none', 'required' or "
                '{"type": "function", "function": {"name": ...}}.',
                field,
            )
        if name not in {t.name for t in tools}:
            raise ToolInputError(
                f"'{field}.function.name' names {name!r}, which is not among the "
                "offered tools.",
                f"{field}.function.name",
            )
        choice = ToolChoice("named", name)
    if choice.mode != "none" and not tools and choice.mode != "auto":
        raise ToolInputError(
            f"'{field}' is {choice.mode!r} but no 'tools' are offered.", field
        )
    return choice
