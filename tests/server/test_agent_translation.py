"""The protocol writers given the service's real events: tool calls, reasoning, text.

The engine does not emit tool-call events yet (tool calling lands separately), so these
feed the writers real `ToolCallStarted` / `ToolCallDelta` / `ToolCallFinished` values
and check the bytes each protocol's clients parse.
"""

from __future__ import annotations

import json

from app.core.turn.parts import (
    REASONING,
    ToolCall,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
)
from app.server.anthropic_messages import messages_response as anthropic
from app.server.events import Accepted, Finished, TextDelta
from app.server.openai_responses import responses_response as responses
from app.server.openai_responses.responses_request import parse_responses_request

CALL = ToolCall("call_1", "get_weather", '{"city": "Paris"}')
EVENTS = [
    TextDelta("Let me think.", REASONING),
    TextDelta("Checking."),
    ToolCallStarted(0, "call_1", "get_weather"),
    ToolCallDelta(0, '{"city": '),
    ToolCallDelta(0, '"Paris"}'),
    ToolCallFinished(0, CALL),
]
DONE = Finished("Checking.", "tool_calls", 50, 7, 40, tool_calls=(CALL,))


def _events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip() or block.startswith(":"):
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_anthropic_stream_of_thinking_text_and_tool_use():
    writer = anthropic.MessageStream("m")
    raw = writer.start(Accepted(50)) + b"".join(writer.event(e) for e in EVENTS)
    raw += writer.finish(DONE)
    events = _events(raw)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == [
        "message_delta",
        "message_stop",
    ]
    starts = [
        body["content_block"] for name, body in events if name == "content_block_start"
    ]
    assert [b["type"] for b in starts] == ["thinking", "text", "tool_use"]
    assert starts[2]["id"] == "call_1" and starts[2]["name"] == "get_weather"
    deltas = [body["delta"] for name, body in events if name == "content_block_delta"]
    partial = "".join(
        d["partial_json"] for d in deltas if d["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "Paris"}
    assert {"type": "thinking_delta", "thinking": "Let me think."} in deltas
    assert names.count("content_block_stop") == 3
    final = events[-2][1]
    assert final["delta"]["stop_reason"] == "tool_use"
    assert final["usage"] == {
        "input_tokens": 10,
        "output_tokens": 7,
        "cache_read_input_tokens": 40,
        "cache_creation_input_tokens": 0,
    }


def test_anthropic_message_object_with_tool_use():
    body = anthropic.message(DONE, "Let me think.", model="m", ident="msg_1")
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][2]["input"] == {"city": "Paris"}
    assert body["stop_reason"] == "tool_use"


def test_responses_stream_of_reasoning_text_and_function_call():
    request = parse_responses_request(
        json.dumps(
            {
                "model": "m",
                "input": "hi",
                "tools": [
                    {"type": "function", "name": "get_weather", "parameters": {}}
                ],
            }
        ).encode()
    )
    writer = responses.ResponseStream("m", request, 0)
    raw = writer.opening() + b"".join(writer.event(e) for e in EVENTS)
    raw += writer.finish(
        Finished("Checking.", "tool_calls", 50, 7, 40, tool_calls=(CALL,))
    )
    events = _events(raw)
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.completed"
    assert [b["sequence_number"] for _, b in events] == list(range(len(events)))
    added = [b["item"]["type"] for n, b in events if n == "response.output_item.added"]
    assert added == ["reasoning", "message", "function_call"]
    args = "".join(
        b["delta"] for n, b in events if n == "response.function_call_arguments.delta"
    )
    assert json.loads(args) == {"city": "Paris"}
    done = [b for n, b in events if n == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == CALL.arguments
    final = events[-1][1]["response"]
    assert [i["status"] for i in final["output"]] == ["completed"] * 3
    assert final["output"][2]["call_id"] == "call_1"
    assert final["usage"]["input_tokens_details"]["cached_tokens"] == 40


def test_a_responses_reply_that_showed_nothing_is_an_empty_message():
    # Only the newlines a template puts before an answer (stripped), or a reply cut
    # before a whole character: tokens were generated, no text came out.
    request = parse_responses_request(b'{"model": "m", "input": "hi"}')
    writer = responses.ResponseStream("m", request, 0)
    raw = writer.opening() + writer.finish(Finished("", "length", 50, 3, 0))
    events = _events(raw)
    names = [name for name, _ in events]
    assert names[2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert [b["sequence_number"] for _, b in events] == list(range(len(events)))
    (item,) = events[-1][1]["response"]["output"]
    assert item["type"] == "message" and item["status"] == "completed"
    assert item["content"] == [{"type": "output_text", "text": "", "annotations": []}]


def test_responses_input_items_become_template_messages():
    request = parse_responses_request(
        json.dumps(
            {
                "model": "m",
                "instructions": "Be terse.",
                "input": [
                    {"role": "user", "content": "Weather?"},
                    {
                        "type": "reasoning",
                        "summary": [{"type": "summary_text", "text": "Tool."}],
                    },
                    {
                        "type": "function_call",
                        "call_id": "c1",
                        "name": "w",
                        "arguments": "{}",
                    },
                    {
                        "type": "function_call_output",
                        "call_id": "c1",
                        "output": "sunny",
                    },
                ],
            }
        ).encode()
    )
    messages = [m.as_dict() for m in request.chat.messages]
    assert messages[0] == {"role": "system", "content": "Be terse."}
    assert messages[2]["reasoning_content"] == "Tool."
    assert messages[2]["tool_calls"][0]["function"]["name"] == "w"
    assert messages[3] == {
        "role": "tool",
        "content": "sunny",
        "tool_call_id": "c1",
        "name": "w",
    }
    assert request.chat.never_trim


def test_an_error_after_the_stream_started_is_response_failed():
    from app.server.errors import ServiceUnavailable

    request = parse_responses_request(b'{"model": "m", "input": "hi"}')
    writer = responses.ResponseStream("m", request, 0)
    writer.opening()
    raw = writer.failed(ServiceUnavailable("The server is stopping.", "shutting_down"))
    (name, body), *_ = _events(raw)
    assert name == "response.failed"
    assert body["response"]["status"] == "failed"
    assert body["response"]["error"] == {
        "code": "shutting_down",
        "message": "The server is stopping.",
    }
    stream = anthropic.MessageStream("m")
    (name, body), *_ = _events(stream.error(None))
    assert name == "error" and body["error"]["type"] == "api_error"


def test_fill_in_the_middle_uses_the_tokenizers_own_tokens():
    from app.server.completions.text_completion import (
        CompletionRequest,
        fim_tokens,
        prompt_ids,
    )

    special = {"<|fim_prefix|>": 7, "<|fim_suffix|>": 8, "<|fim_middle|>": 9}

    class Tokenizer:
        def encode(self, text: str) -> list[int]:
            if text in special:
                return [special[text]]
            return [100 + ord(c) for c in text]

    assert fim_tokens(Tokenizer().encode) == (7, 8, 9)
    assert fim_tokens(lambda text: [1, 2]) is None
    request = CompletionRequest("m", "ab", "c", False, 4, None, None, (), None)
    assert prompt_ids(Tokenizer(), request) == [7, 197, 198, 8, 199, 9]


def test_codex_namespace_tools_are_opened_and_hosted_tools_left_out():
    body = {
        "model": "m",
        "input": "hi",
        "tools": [
            {"type": "function", "name": "exec_command", "parameters": {}},
            {
                "type": "namespace",
                "name": "multi_agent_v1",
                "tools": [
                    {"type": "function", "name": "close_agent", "parameters": {}}
                ],
            },
            {"type": "web_search"},
        ],
    }
    request = parse_responses_request(json.dumps(body).encode())
    assert [t.name for t in request.chat.tools] == ["exec_command", "close_agent"]
