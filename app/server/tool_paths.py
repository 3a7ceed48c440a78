"""The service's tool paths: tool definitions counted like any prompt text, and the
calls of a reply collected from the engine's events.

Tool definitions are rendered into the prompt by the template, so every count the
trim policy and the budget make must include them: `ToolsEngine` is the engine as
the service's planning code sees it, rendering every message list with the
request's tools. A model whose template cannot render tools is refused in words.
"""

from __future__ import annotations

from typing import Any

from app.core.tools.call_stream import MalformedCall
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import ToolCall, ToolCallFinished
from app.server.errors import RequestError


class ToolsEngine:
    """The engine, rendering every prompt with one request's tools.

    Args:
        engine: The engine.
        tools: The request's tools (their definitions are rendered into prompts).
    """

    def __init__(self, engine: Any, tools: TurnTools):
        self._engine = engine
        self._tools = tools.template_tools()

    def render(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
    ) -> list[int]:
        """Render with the request's tools (``tools`` overrides them)."""
        return self._engine.render(
            messages, add_generation_prompt, tools or self._tools
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


def planning_engine(engine: Any, tools: TurnTools | None) -> Any:
    """The engine as the request's planning sees it; refuses tools a model cannot take.

    Raises:
        RequestError: Tools were offered and the model's template has no tool support.
    """
    if tools is None or not tools.tools:
        return engine
    if not engine.supports_tools():
        raise RequestError(
            "The loaded model's chat template has no tool support (it does not render "
            "'tools', or its tool-call format is not one mlx-lm can parse), so "
            "'tools' cannot be offered to it. Leave out 'tools' or load a model "
            "trained for tool calls.",
            code="tools_not_supported",
            param="tools",
        )
    if tools.choice.forces_call:
        call_format = engine.tool_call_format()
        if call_format is None or not call_format.json_body:
            raise RequestError(
                f"'tool_choice' {tools.choice.mode!r} is enforced only for models "
                "that write calls as JSON between markers (mlx-lm's json_tools "
                f"format); this model writes {call_format.name!r} calls. Use 'auto'.",
                code="tool_choice_not_supported",
                param="tool_choice",
            )
    return ToolsEngine(engine, tools)


class CallCollector:
    """Collects a reply's finished calls and the notes about calls it could not use."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.notes: list[str] = []

    def take(self, event: object) -> bool:
        """Record ``event`` if it is a finished call or a note; True if it was."""
        if isinstance(event, ToolCallFinished):
            self.calls.append(event.call)
            return True
        if isinstance(event, MalformedCall):
            self.notes.append(event.reason)
            return True
        return False

    def finish_reason(self, reason: str) -> str:
        """``tool_calls`` when the reply ended normally after making calls."""
        return "tool_calls" if self.calls and reason == "stop" else reason

    def extension(self) -> dict:
        """The ``swapless`` object's tool part."""
        return {"tool_call_notes": self.notes} if self.notes else {}
