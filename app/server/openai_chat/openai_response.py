"""The response shapes of the OpenAI Chat Completions protocol, built from our events.

A non-streamed reply is one ``chat.completion`` object; a streamed one is a series of
``chat.completion.chunk`` objects sent as server-sent events and closed by
``data: [DONE]``; a tool call streams as a chunk with its index, id and name, then
chunks of argument text, as OpenAI's do. Both carry ``usage`` (prompt, completion and cached prompt tokens)
and a ``swapless`` extension object (trimmed or not, summary tokens, effective limit,
cache numbers) that OpenAI clients keep as an extra field. Errors use OpenAI's
``{"error": {message, type, param, code}}``.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from app.core.turn.parts import ToolCallDelta, ToolCallStarted
from app.server.errors import RequestError
from app.server.events import Finished

OWNER = "swapless"


def completion_id() -> str:
    """A fresh id for one completion (shared by all chunks of a stream)."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


def usage(event: Finished) -> dict:
    """The ``usage`` object of a finished reply."""
    return {
        "prompt_tokens": event.prompt_tokens,
        "completion_tokens": event.completion_tokens,
        "total_tokens": event.prompt_tokens + event.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": event.cached_tokens},
    }


def finish_reason(event: Finished) -> str:
    """OpenAI's finish reason (a cancelled reply ended early: ``stop``)."""
    if event.finish_reason in ("length", "tool_calls"):
        return event.finish_reason
    return "stop"


def message(event: Finished) -> dict:
    """The assistant message of a finished reply: its answer, its tool calls, and its
    reasoning apart when there is any.

    ``reasoning_content`` is the field llama.cpp, LM Studio, vLLM and DeepSeek's API
    send, and what the popular clients (Open WebUI, LibreChat, the Vercel AI SDK's
    OpenAI-compatible provider) read.
    """
    body: dict = {"role": "assistant", "content": event.text}
    if event.tool_calls:
        # OpenAI sends null content with calls and no text (the line breaks a
        # template writes between parallel calls are not text).
        body["content"] = event.text if event.text.strip() else None
        body["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in event.tool_calls
        ]
    if event.reasoning:
        body["reasoning_content"] = event.reasoning
    return body


def completion(event: Finished, *, model: str, ident: str, created: int) -> dict:
    """The ``chat.completion`` object of a non-streamed reply."""
    return {
        "id": ident,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message(event),
                "logprobs": None,
                "finish_reason": finish_reason(event),
            }
        ],
        "usage": usage(event),
        "swapless": event.swapless,
    }


class ChunkWriter:
    """Builds the server-sent events of one streamed reply.

    Args:
        model: The model id.
        include_usage: Add ``usage: null`` to every chunk and a last usage chunk.
    """

    def __init__(self, model: str, include_usage: bool):
        self.model = model
        self.include_usage = include_usage
        self.ident = completion_id()
        self.created = int(time.time())

    def _chunk(self, choices: list, **extra) -> bytes:
        body = {
            "id": self.ident,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            **extra,
        }
        if self.include_usage and "usage" not in body:
            body["usage"] = None
        return sse(body)

    def _delta(self, delta: dict, reason: str | None = None, **extra) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
        return self._chunk([choice], **extra)

    def role(self) -> bytes:
        """The first chunk: the assistant role, no text yet."""
        return self._delta({"role": "assistant", "content": ""})

    def text(self, text: str, channel: str = "answer") -> bytes:
        """A chunk of reply text (of reasoning: in ``reasoning_content``)."""
        if channel == "reasoning":
            return self._delta({"reasoning_content": text})
        return self._delta({"content": text})

    def tool_call_started(self, event: ToolCallStarted) -> bytes:
        """A call's first chunk: its index, id and name (arguments follow)."""
        call = {
            "index": event.index,
            "id": event.id,
            "type": "function",
            "function": {"name": event.name, "arguments": ""},
        }
        return self._delta({"tool_calls": [call]})

    def tool_call_delta(self, event: ToolCallDelta) -> bytes:
        """A fragment of a call's arguments."""
        call = {"index": event.index, "function": {"arguments": event.arguments}}
        return self._delta({"tool_calls": [call]})

    def finish(self, event: Finished) -> bytes:
        """The last chunk(s) and ``[DONE]``."""
        out = self._delta({}, finish_reason(event), swapless=event.swapless)
        if self.include_usage:
            out += self._chunk([], usage=usage(event), swapless=event.swapless)
        return out + DONE

    def error(self, error: RequestError | None) -> bytes:
        """An error after the stream started, then ``[DONE]``."""
        return sse(error_body(error)) + DONE


DONE = b"data: [DONE]\n\n"


def sse(body: dict) -> bytes:
    """One server-sent event carrying a JSON object."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return b"data: " + text.encode("utf-8") + b"\n\n"


def error_body(error: RequestError | None) -> dict:
    """OpenAI's error object; None stands for a bug (no details are shown)."""
    if error is None:
        return {
            "error": {
                "message": "The server failed while answering; the details are in its "
                "log.",
                "type": "server_error",
                "param": None,
                "code": "internal_error",
            }
        }
    body: dict[str, Any] = {
        "message": str(error),
        "type": error.error_type,
        "param": error.param,
        "code": error.code,
    }
    if error.details:
        body["swapless"] = error.details
    return {"error": body}


def models_list(model_id: str | None, created: int) -> dict:
    """The ``GET /v1/models`` body (empty while no model is loaded)."""
    data = [model_object(model_id, created)] if model_id else []
    return {"object": "list", "data": data}


def model_object(model_id: str, created: int) -> dict:
    """One model object."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": OWNER}
