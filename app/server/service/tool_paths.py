"""The service's tool paths: from a request's tool fields to what the engine enforces.

Every protocol adapter (OpenAI Chat, Responses, Anthropic Messages) fills the same
`ChatRequest` fields — ``tools``, ``tool_choice``, ``parallel_tool_calls`` and the
output format — and `turn_tools_of` turns them into the engine's `TurnTools`: calls
parsed in the model's own format, and a grammar for a forced call or a JSON schema.
"""

from __future__ import annotations

from typing import Any

from app.core.tools.call_stream import CONSTRAINED_FORMATS
from app.core.tools.gemma4_grammar import check_gemma4_tools
from app.core.tools.tool_specs import ToolChoice, ToolInputError
from app.core.tools.turn_tools import TurnTools
from app.server.errors import RequestError


def choice_of(tool_choice: str) -> ToolChoice:
    """``auto``/``none``/``required``, or a function's name, as a `ToolChoice`."""
    if tool_choice in ("auto", "none", "required"):
        return ToolChoice(tool_choice)
    return ToolChoice("named", tool_choice)


def turn_tools_of(request: Any, engine: Any) -> TurnTools | None:
    """The request's `TurnTools`, or None for plain chat.

    Raises:
        RequestError: A forced call on a model whose call format no grammar here
            constrains.
    """
    schema = getattr(request, "response_schema", None)
    json_object = getattr(request, "json_object", False)
    if not request.tools and schema is None and not json_object:
        return None
    turn = TurnTools(
        tools=tuple(request.tools),
        choice=choice_of(request.tool_choice) if request.tools else ToolChoice("none"),
        parallel=getattr(request, "parallel_tool_calls", True),
        response_schema=schema,
        json_object=json_object,
    )
    if turn.parses_calls and turn.choice.forces_call:
        call_format = engine.tool_call_format()
        if not call_format.constrained:
            raise RequestError(
                f"'tool_choice' {turn.choice.mode!r} is enforced only for models "
                "that write calls in one of the formats "
                f"{', '.join(CONSTRAINED_FORMATS)}; this model writes "
                f"{call_format.name!r} calls. Use 'auto'.",
                code="tool_choice_not_supported",
                param="tool_choice",
            )
        if call_format.name == "gemma4":
            try:
                check_gemma4_tools(turn.choice.allowed(turn.tools))
            except ToolInputError as exc:
                raise RequestError(
                    str(exc), code="tool_choice_not_supported", param=exc.field
                ) from None
    return turn
