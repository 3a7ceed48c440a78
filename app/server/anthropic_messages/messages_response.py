"""The response shapes of Anthropic's Messages protocol, built from the service's events.

A non-streamed reply is one ``message`` object; a streamed one is the event sequence
Anthropic's clients require: ``message_start``, per content block
``content_block_start`` / ``_delta`` (``thinking_delta``, ``text_delta``,
``input_json_delta``) / ``_stop``, ``message_delta`` (stop reason, usage),
``message_stop``; ``ping`` keeps a quiet stream alive. Usage follows Anthropic:
``input_tokens`` counts only prompt tokens that were computed, the reused ones are
``cache_read_input_tokens``. Errors are ``{"type": "error", "error": {type, message}}``.
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

# Anthropic's error types by HTTP status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
}
# Thinking blocks carry a signature in Anthropic's API; clients send it back and
# Swapless ignores it, so any constant does.
SIGNATURE = "swapless"


def message_id() -> str:
    """A fresh message id."""
    return f"msg_{uuid.uuid4().hex[:24]}"


def error_body(error: RequestError | None) -> dict:
    """Anthropic's error object (None stands for a bug: no details shown)."""
    if error is None:
        return {
            "type": "error",
            "error": {
                "type": "api_error",
                "message": "The server failed while answering; the details are in "
                "its log.",
            },
        }
    kind = ERROR_TYPES.get(error.status, "invalid_request_error")
    if error.status == 503 and error.code != "memory_pressure":
        kind = "api_error" if error.code == "model_not_loaded" else kind
    return {"type": "error", "error": {"type": kind, "message": str(error)}}


def stop_reason(event: Finished) -> str:
    """Anthropic's stop reason of a finished reply."""
    if event.finish_reason == "length":
        return "max_tokens"
    if event.tool_calls:
        return "tool_use"
    return "stop_sequence" if event.stop_sequence else "end_turn"


def usage(event: Finished) -> dict:
    """The ``usage`` object of a finished reply."""
    return {
        "input_tokens": event.prompt_tokens - event.cached_tokens,
        "output_tokens": event.completion_tokens,
        "cache_read_input_tokens": event.cached_tokens,
        "cache_creation_input_tokens": 0,
    }


def message(event: Finished, reasoning: str, *, model: str, ident: str) -> dict:
    """The ``message`` object of a non-streamed reply."""
    content: list[dict[str, Any]] = []
    if reasoning:
        content.append(
            {"type": "thinking", "thinking": reasoning, "signature": SIGNATURE}
        )
    if event.text or not event.tool_calls:
        content.append({"type": "text", "text": event.text})
    for call in event.tool_calls:
        content.append(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.name,
                "input": _input(call.arguments),
            }
        )
    return {
        "id": ident,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(event),
        "stop_sequence": event.stop_sequence or None,
        "usage": usage(event),
        "swapless": event.swapless,
    }


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return {"_raw": arguments}  # never lose what the model wrote


def sse(name: str, body: dict) -> bytes:
    """One named server-sent event."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return f"event: {name}\ndata: {text}\n\n".encode()


PING = sse("ping", {"type": "ping"})


class MessageStream:
    """Builds the events of one streamed reply, block by block.

    Args:
        model: The model id.
    """

    def __init__(self, model: str):
        self.model = model
        self.ident = message_id()
        self._index = -1
        self._open: str | None = None  # kind of the block open now

    def start(self, accepted: Accepted) -> bytes:
        """``message_start``."""
        return sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": self.ident,
                    "type": "message",
                    "role": "assistant",
                    "model": self.model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {
                        "input_tokens": accepted.prompt_tokens,
                        "output_tokens": 0,
                        "cache_read_input_tokens": 0,
                        "cache_creation_input_tokens": 0,
                    },
                },
            },
        )

    def _begin(self, kind: str, block: dict) -> bytes:
        out = self._close()
        self._index += 1
        self._open = kind
        return out + sse(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": self._index,
                "content_block": block,
            },
        )

    def _delta(self, delta: dict) -> bytes:
        return sse(
            "content_block_delta",
            {"type": "content_block_delta", "index": self._index, "delta": delta},
        )

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        out = b""
        if self._open == "thinking":
            out = self._delta({"type": "signature_delta", "signature": SIGNATURE})
        self._open = None
        return out + sse(
            "content_block_stop", {"type": "content_block_stop", "index": self._index}
        )

    def event(self, item: object) -> bytes:
        """The events of one service event (empty for those that send nothing)."""
        if isinstance(item, TextDelta):
            if item.channel == REASONING:
                out = b""
                if self._open != "thinking":
                    out = self._begin(
                        "thinking",
                        {"type": "thinking", "thinking": "", "signature": ""},
                    )
                return out + self._delta(
                    {"type": "thinking_delta", "thinking": item.text}
                )
            out = b""
            if self._open != "text":
                out = self._begin("text", {"type": "text", "text": ""})
            return out + self._delta({"type": "text_delta", "text": item.text})
        if isinstance(item, ToolCallStarted):
            return self._begin(
                "tool_use",
                {"type": "tool_use", "id": item.id, "name": item.name, "input": {}},
            )
        if isinstance(item, ToolCallDelta):
            return self._delta(
                {"type": "input_json_delta", "partial_json": item.arguments}
            )
        if isinstance(item, ToolCallFinished):
            return self._close()
        return b""

    def finish(self, event: Finished) -> bytes:
        """Close the last block, then ``message_delta`` and ``message_stop``."""
        out = b""
        if self._index < 0:  # clients expect at least one block
            out += self._begin("text", {"type": "text", "text": ""})
        out += self._close()
        out += sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {
                    "stop_reason": stop_reason(event),
                    "stop_sequence": event.stop_sequence or None,
                },
                "usage": usage(event),
            },
        )
        return out + sse("message_stop", {"type": "message_stop"})

    def error(self, error: RequestError | None) -> bytes:
        """An ``error`` event after the stream started."""
        return sse("error", error_body(error))
