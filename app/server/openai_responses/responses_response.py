"""The response shapes of OpenAI's Responses protocol, built from the service's events.

A reply's output is a list of items — ``reasoning``, a ``message`` with ``output_text``,
and one ``function_call`` (or ``custom_tool_call``) per call — each streamed as
``response.output_item.added``, its deltas, and ``response.output_item.done``, between
``response.created`` / ``response.in_progress`` and ``response.completed`` (or
``response.incomplete`` when ``max_output_tokens`` cut it, ``response.failed`` on an
error). Every event carries a ``sequence_number``. ``usage`` reports the prompt tokens
reused from a cache as ``input_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from app.core.turn.parts import (
    REASONING,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from app.server.errors import RequestError
from app.server.events import Accepted, Finished, TextDelta
from app.server.openai_chat.openai_response import error_body
from app.server.openai_responses.responses_request import ResponsesRequest

KEEPALIVE = b": keep-alive\n\n"


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def sse(body: dict) -> bytes:
    """One server-sent event named after its type."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return f"event: {body['type']}\ndata: {text}\n\n".encode()


class ResponseStream:
    """Builds one response: its items as they stream, and the whole object.

    Args:
        model: The model id.
        request: The parsed request (for the fields the response repeats).
        created: Creation time (seconds since the epoch).
    """

    def __init__(self, model: str, request: ResponsesRequest, created: float):
        self.model = model
        self.request = request
        self.ident = _id("resp")
        self.created = int(created)
        self.output: list[dict[str, Any]] = []
        self.status = "in_progress"
        self.usage: dict | None = None
        self.incomplete: dict | None = None
        self.error: dict | None = None
        self._sequence = 0
        self._open: dict[str, Any] | None = None
        self._calls: dict[int, dict[str, Any]] = {}

    # -- the whole object ------------------------------------------------------------

    def response_object(self) -> dict:
        """The ``response`` object as it stands."""
        return {
            "id": self.ident,
            "object": "response",
            "created_at": self.created,
            "status": self.status,
            "model": self.model,
            "output": list(self.output),
            "usage": self.usage,
            "error": self.error,
            "incomplete_details": self.incomplete,
            "store": False,
            "previous_response_id": None,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            **self.request.echo,
        }

    def _event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse(body)

    def opening(self) -> bytes:
        """``response.created`` and ``response.in_progress``."""
        return self._event("response.created", response=self.response_object()) + (
            self._event("response.in_progress", response=self.response_object())
        )

    # -- items -----------------------------------------------------------------------

    def _add(self, item: dict[str, Any]) -> bytes:
        out = self._close()
        self.output.append(item)
        self._open = item
        return out + self._event(
            "response.output_item.added", output_index=len(self.output) - 1, item=item
        )

    def _close(self) -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        index = self.output.index(item)
        out = b""
        if item["type"] == "message":
            part = item["content"][0]
            out += self._event(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
            )
            out += self._event(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
        elif item["type"] == "reasoning":
            out += self._event(
                "response.reasoning_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=item["content"][0]["text"],
            )
        item["status"] = "completed"
        return out + self._event(
            "response.output_item.done", output_index=index, item=item
        )

    def event(self, item: object) -> bytes:
        """The events of one service event (empty for those that send nothing)."""
        if isinstance(item, TextDelta) and item.channel == REASONING:
            out = b""
            if self._open is None or self._open["type"] != "reasoning":
                out = self._add(
                    {
                        "type": "reasoning",
                        "id": _id("rs"),
                        "summary": [],
                        "content": [{"type": "reasoning_text", "text": ""}],
                        "status": "in_progress",
                    }
                )
            open_item = self._open
            assert open_item is not None
            open_item["content"][0]["text"] += item.text
            return out + self._event(
                "response.reasoning_text.delta",
                item_id=open_item["id"],
                output_index=len(self.output) - 1,
                content_index=0,
                delta=item.text,
            )
        if isinstance(item, TextDelta):
            out = b""
            if self._open is None or self._open["type"] != "message":
                out = self._open_message()
            open_item = self._open
            assert open_item is not None
            open_item["content"][0]["text"] += item.text
            return out + self._event(
                "response.output_text.delta",
                item_id=open_item["id"],
                output_index=len(self.output) - 1,
                content_index=0,
                delta=item.text,
            )
        if isinstance(item, ToolCallStarted):
            custom = item.name in self.request.custom_tools
            call: dict[str, Any] = {
                "type": "custom_tool_call" if custom else "function_call",
                "id": _id("ctc" if custom else "fc"),
                "call_id": item.id,
                "name": item.name,
                "status": "in_progress",
            }
            call["input" if custom else "arguments"] = ""
            self._calls[item.index] = call
            return self._add(call)
        if isinstance(item, ToolCallDelta):
            call = self._calls.get(item.index) or {}
            if not call or call["type"] != "function_call":
                return b""  # a custom tool's input is sent whole when it is done
            call["arguments"] += item.arguments
            return self._event(
                "response.function_call_arguments.delta",
                item_id=call["id"],
                output_index=self.output.index(call),
                delta=item.arguments,
            )
        if isinstance(item, ToolCallFinished):
            call = self._calls.get(item.index) or {}
            if not call:
                return b""
            index = self.output.index(call)
            if call["type"] == "custom_tool_call":
                try:
                    call["input"] = str(item.call.arguments_dict().get("input", ""))
                except ValueError:
                    call["input"] = item.call.arguments
                return self._close()
            call["arguments"] = item.call.arguments
            done = self._event(
                "response.function_call_arguments.done",
                item_id=call["id"],
                output_index=index,
                arguments=item.call.arguments,
            )
            return done + self._close()
        if isinstance(item, Accepted):
            return b""
        return b""

    def _open_message(self) -> bytes:
        """Open an assistant ``message`` item with one empty ``output_text`` part."""
        out = self._add(
            {
                "type": "message",
                "id": _id("msg"),
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            }
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        open_item = self._open
        assert open_item is not None
        open_item["content"].append(part)
        return out + self._event(
            "response.content_part.added",
            item_id=open_item["id"],
            output_index=len(self.output) - 1,
            content_index=0,
            part=dict(part),
        )

    # -- the end ---------------------------------------------------------------------

    def finish(self, event: Finished) -> bytes:
        """Close the last item, then ``response.completed`` (or ``.incomplete``).

        A reply that showed nothing (its tokens were only the newlines a template puts
        before an answer, or it was cut before a whole character) still answers with
        an empty ``message``: a response always holds an item, as a chat completion
        always holds a message.
        """
        out = self._close()
        if not self.output:
            out += self._open_message() + self._close()
        self.usage = {
            "input_tokens": event.prompt_tokens,
            "input_tokens_details": {"cached_tokens": event.cached_tokens},
            "output_tokens": event.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": event.prompt_tokens + event.completion_tokens,
        }
        if event.finish_reason == "length":
            self.status = "incomplete"
            self.incomplete = {"reason": "max_output_tokens"}
            kind = "response.incomplete"
        else:
            self.status = "completed"
            kind = "response.completed"
        return out + self._event(kind, response=self.response_object())

    def failed(self, error: RequestError | None) -> bytes:
        """``response.failed`` with the error."""
        body = error_body(error)["error"]
        self.status = "failed"
        self.error = {
            "code": body["code"] or "server_error",
            "message": body["message"],
        }
        return self._event("response.failed", response=self.response_object())
