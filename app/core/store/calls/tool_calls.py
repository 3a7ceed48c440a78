"""The tool calls a reply made, stored with it (schema migration 7).

A reply that calls tools is stored as an assistant message (its text, maybe empty)
plus one row per call: the server and tool, the arguments as the model wrote them,
the result *as given to the model* (cut with the note when it did not fit), whether
it was an error or a denial, the user's decision and the time it took. Rendering the
conversation again (`tool_messages`) gives the model the same ``tool_calls`` and
``tool`` messages it saw, so a reopened conversation prompts the same tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from app.core.store.base import StoreBase, inserted_id
from app.core.turn.parts import ToolCall

DECISIONS = ("once", "always", "trusted", "allowed", "deny", "")


@dataclass(frozen=True)
class StoredToolCall:
    """One tool call and its result.

    Attributes:
        call_id: The model's id for the call (``call_…``); the result refers to it.
        server: The server that ran it (empty when no server offers the tool).
        tool: The tool's name as the model called it.
        arguments: The arguments as JSON text.
        result: The text given back to the model (with the cut note when cut).
        is_error: The call failed, timed out, was stopped or was denied.
        decision: ``once``, ``always``, ``trusted``, ``allowed`` (a script's list),
            ``deny``, or empty when it never came to asking.
        cut_note: The note added when the result was cut to fit, else empty.
        seconds: Wall time of the call.
        original_tokens: Tokens of the whole result before any cut.
        result_tokens: Tokens of ``result``.
        message_id: The assistant message that made the call (0 before storing).
        position: Its place among that message's calls.
        created_at: When it was stored (ISO text), empty before storing.
    """

    call_id: str
    server: str
    tool: str
    arguments: str
    result: str
    is_error: bool = False
    decision: str = ""
    cut_note: str = ""
    seconds: float = 0.0
    original_tokens: int | None = None
    result_tokens: int | None = None
    message_id: int = 0
    position: int = 0
    created_at: str = ""

    def call_dict(self) -> dict[str, Any]:
        """The call as an assistant message's ``tool_calls`` entry."""
        return ToolCall(self.call_id, self.tool, self.arguments).template_dict()

    def result_message(self) -> dict[str, Any]:
        """The result as the ``tool`` message the model was given."""
        return {
            "role": "tool",
            "tool_call_id": self.call_id,
            "name": self.tool,
            "content": self.result,
        }

    def to_dict(self) -> dict[str, Any]:
        """The call as exported (JSON)."""
        return {
            "call_id": self.call_id,
            "server": self.server,
            "tool": self.tool,
            "arguments": self.arguments,
            "result": self.result,
            "is_error": self.is_error,
            "decision": self.decision,
            "cut_note": self.cut_note,
            "seconds": self.seconds,
            "original_tokens": self.original_tokens,
            "result_tokens": self.result_tokens,
            "created_at": self.created_at,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> StoredToolCall:
        """Build from a ``tool_calls`` row."""
        return cls(
            call_id=row["call_id"],
            server=row["server"],
            tool=row["tool"],
            arguments=row["arguments"],
            result=row["result"],
            is_error=bool(row["is_error"]),
            decision=row["decision"],
            cut_note=row["cut_note"],
            seconds=float(row["seconds"] or 0.0),
            original_tokens=row["original_tokens"],
            result_tokens=row["result_tokens"],
            message_id=row["message_id"],
            position=row["position"],
            created_at=row["created_at"],
        )


def _row(call: StoredToolCall, conversation_id: int, now: str) -> dict[str, Any]:
    if call.decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}, not {call.decision!r}")
    return {
        "conversation_id": conversation_id,
        "message_id": call.message_id,
        "position": call.position,
        "call_id": call.call_id,
        "server": call.server,
        "tool": call.tool,
        "arguments": call.arguments,
        "result": call.result,
        "is_error": int(call.is_error),
        "decision": call.decision,
        "cut_note": call.cut_note,
        "original_tokens": call.original_tokens,
        "result_tokens": call.result_tokens,
        "seconds": call.seconds,
        "created_at": call.created_at or now,
    }


class ToolCallsMixin(StoreBase):
    """Tool-call methods of `Store`."""

    def add_tool_call(self, call: StoredToolCall) -> int:
        """Store one call of the assistant message ``call.message_id``.

        Returns:
            The new row's id.

        Raises:
            NotFoundError: No message has that id.
            ValueError: An unknown decision.
        """
        with self._writing() as db:
            message = self._row(db, "messages", call.message_id, "Message")
            table = db.table("tool_calls")
            table.insert(_row(call, message["conversation_id"], self._now()))
            return inserted_id(table)

    def tool_calls(
        self, conversation_id: int, message_ids: Iterable[int] | None = None
    ) -> dict[int, list[StoredToolCall]]:
        """The calls of a conversation by the message that made them, in order.

        Args:
            conversation_id: The conversation.
            message_ids: Only these messages' calls (all when None).
        """
        wanted = None if message_ids is None else set(message_ids)
        with self._reading() as db:
            rows = db.query(
                "SELECT * FROM tool_calls WHERE conversation_id = ?"
                " ORDER BY message_id, position, id",
                [conversation_id],
            )
            calls: dict[int, list[StoredToolCall]] = {}
            for row in rows:
                if wanted is None or row["message_id"] in wanted:
                    calls.setdefault(row["message_id"], []).append(
                        StoredToolCall.from_row(row)
                    )
        return calls
