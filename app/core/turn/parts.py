"""Reasoning and tool calls as frozen values, and the channels a reply's text belongs to.

A model that reasons writes its thoughts before the answer; a model that uses tools
writes calls in its own markup. The engine separates both from the answer as it
streams, and everything above it sees only these values:

- `GenerationEvent.channel` (`app.core.engine.events`) says whether a text delta is
  `REASONING` or `ANSWER`;
- `ToolCallStarted` / `ToolCallDelta` / `ToolCallFinished` stream one call (the id and
  name first, then argument fragments), the way OpenAI and Anthropic stream theirs;
- a message given to the model (`app.core.chat.model_messages`) is a dict in Hugging
  Face's chat-template convention: ``role``, ``content``, and for an assistant turn
  ``reasoning_content`` and ``tool_calls`` (``[{"id", "type": "function",
  "function": {"name", "arguments"}}]``); a tool result is ``{"role": "tool",
  "tool_call_id", "name", "content"}``. Templates read exactly these keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Channel = Literal["answer", "reasoning"]
ANSWER: Channel = "answer"
REASONING: Channel = "reasoning"


@dataclass(frozen=True)
class ToolSpec:
    """A function the model may call.

    Attributes:
        name: The function's name, as the model must write it.
        description: What it does, in the words the model reads.
        parameters: A JSON schema (an object schema) for its arguments.
    """

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)

    def arguments_schema(self) -> dict[str, Any]:
        """The schema a call's arguments must meet: ``parameters``, or for a tool
        without any an empty object (OpenAI: omitting ``parameters`` defines a
        function with an empty parameter list)."""
        return self.parameters or {
            "type": "object",
            "properties": {},
            "additionalProperties": False,
        }

    def template_dict(self) -> dict[str, Any]:
        """Return the tool as chat templates expect it (OpenAI's function shape)."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters or {"type": "object", "properties": {}},
            },
        }


@dataclass(frozen=True)
class ToolCall:
    """One complete call the model made.

    Attributes:
        id: Unique within the conversation (``call_…``); results refer to it.
        name: The function called.
        arguments: The arguments as JSON text (an object).
    """

    id: str
    name: str
    arguments: str

    def arguments_dict(self) -> dict[str, Any]:
        """Return the arguments parsed (an empty dict for empty text).

        Raises:
            ValueError: The arguments are not a JSON object.
        """
        if not self.arguments.strip():
            return {}
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError("tool-call arguments must be a JSON object")
        return value

    def template_dict(self) -> dict[str, Any]:
        """Return the call as an assistant message's ``tool_calls`` entry."""
        try:
            arguments: Any = self.arguments_dict()
        except ValueError:
            arguments = self.arguments
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": arguments},
        }


@dataclass(frozen=True)
class ToolResult:
    """What a tool returned (or why it could not run), given back to the model.

    Attributes:
        call_id: The `ToolCall.id` answered.
        name: The function's name.
        content: The result as text.
        is_error: True when the call failed or was denied.
    """

    call_id: str
    name: str
    content: str
    is_error: bool = False

    def template_dict(self) -> dict[str, Any]:
        """Return the result as a ``tool`` message."""
        return {
            "role": "tool",
            "tool_call_id": self.call_id,
            "name": self.name,
            "content": self.content,
        }


@dataclass(frozen=True)
class ToolCallStarted:
    """The model began a call: its id and name are known, arguments follow.

    Attributes:
        index: The call's position among this reply's calls (0-based).
        id: The call's id.
        name: The function called.
    """

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A fragment of a call's arguments (JSON text), in order.

    Attributes:
        index: The call's position among this reply's calls.
        arguments: The next characters of the arguments' JSON text.
    """

    index: int
    arguments: str


@dataclass(frozen=True)
class ToolCallFinished:
    """A call is complete.

    Attributes:
        index: The call's position among this reply's calls.
        call: The whole call.
    """

    index: int
    call: ToolCall
