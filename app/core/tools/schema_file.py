"""A JSON schema from a file, for `swapless chat --json-schema FILE`, and the engine
view that puts it on every turn.

The file is checked like a request's ``response_format`` (a valid JSON schema within
the size and depth limits that the library can enforce), so a bad file is one line
and exit code 2 before any model loads. `SchemaEngine` hands the constraint to the
engine on every ``chat`` call, so the conversation session needs no knowledge of it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.tools.grammar import check_grammar, json_schema_grammar
from app.core.tools.tool_specs import ToolInputError, check_schema
from app.core.tools.turn_tools import TurnTools

MAX_SCHEMA_FILE_BYTES = 1_048_576


def load_schema_file(path: str | Path) -> dict[str, Any]:
    """Read and check a JSON schema file.

    Raises:
        ToolInputError: Unreadable, not JSON, not a schema, or not enforceable.
    """
    field = "--json-schema"
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SCHEMA_FILE_BYTES:
            raise ToolInputError(
                f"{path} is {size} bytes; a schema file may be at most "
                f"{MAX_SCHEMA_FILE_BYTES}.",
                field,
            )
        schema = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ToolInputError(f"cannot read {path}: {exc.strerror}", field) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ToolInputError(f"{path} is not JSON: {exc}", field) from None
    check_schema(schema, field, require_object=False)
    check_grammar(json_schema_grammar(schema), field)
    return schema


class SchemaEngine:
    """An engine whose every chat turn must validate against one JSON schema.

    Args:
        engine: The engine.
        schema: The checked schema (`load_schema_file`).
    """

    def __init__(self, engine: Any, schema: dict[str, Any]):
        self._engine = engine
        self._tools = TurnTools(response_schema=schema)

    def chat(self, *args: Any, **kwargs: Any) -> Any:
        """The engine's ``chat``, constrained to the schema."""
        kwargs.setdefault("tools", self._tools)
        return self._engine.chat(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)
