"""What one turn asks of tools and output format, as one frozen value.

The server (or the CLI) builds it from a request; the engine renders ``tools``
through the chat template, parses calls from the output, and enforces the
constraint token by token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.core.tools.tool_specs import ToolChoice
from app.core.turn.parts import ToolSpec


@dataclass(frozen=True)
class TurnTools:
    """Tools offered and the output constraint of one turn.

    Attributes:
        tools: The functions the model may call (rendered into the prompt).
        choice: ``auto``/``none``/``required``/``named``.
        parallel: Several calls in one reply are allowed.
        response_schema: A JSON schema the whole reply must validate against.
        json_object: The reply must be one JSON object (any).
    """

    tools: tuple[ToolSpec, ...] = ()
    choice: ToolChoice = field(default_factory=ToolChoice)
    parallel: bool = True
    response_schema: dict[str, Any] | None = None
    json_object: bool = False

    @property
    def offers_tools(self) -> bool:
        """True when the tools are shown to the model: ``tool_choice: "none"`` renders
        the prompt without them (docs/structured-output.md says why)."""
        return bool(self.tools) and self.choice.mode != "none"

    def template_tools(self) -> list[dict[str, Any]] | None:
        """The tools as chat templates take them (None when none are offered)."""
        if not self.offers_tools:
            return None
        return [t.template_dict() for t in self.tools] or None

    @property
    def parses_calls(self) -> bool:
        """True when calls in the output are taken out of the answer."""
        return self.offers_tools

    @property
    def constrained(self) -> bool:
        """True when decoding is constrained by a grammar."""
        return (
            (self.parses_calls and self.choice.forces_call)
            or self.response_schema is not None
            or self.json_object
        )
