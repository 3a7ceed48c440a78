"""The call splitter on text as a model streams it (mlx-lm's own json_tools parser)."""

from __future__ import annotations

import itertools
import json

import pytest
from mlx_lm.tool_parsers import json_tools, mistral, qwen3_coder

from app.core.tools.call_stream import CallFormat, CallStream, MalformedCall
from app.core.turn.parts import (
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolSpec,
)

JSON_TOOLS = CallFormat(
    "json_tools",
    json_tools.tool_call_start,
    json_tools.tool_call_end,
    json_tools.parse_tool_call,
)
WEATHER = ToolSpec(
    "get_weather",
    "Weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)


def run(text: str, pieces: int, tools=(WEATHER,), fmt=JSON_TOOLS) -> list:
    """Feed ``text`` in chunks of ``pieces`` characters; return every item."""
    counter = itertools.count()
    stream = CallStream(fmt, tools, new_id=lambda: f"call_{next(counter)}")
    out = []
    for at in range(0, len(text), pieces):
        out += stream.feed(text[at : at + pieces])
    return out + stream.close()


def answer_text(items: list) -> str:
    return "".join(i for i in items if isinstance(i, str))


CALL = (
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


@pytest.mark.parametrize("pieces", [1, 2, 5, 1000])
def test_a_call_never_reaches_the_answer_whatever_the_chunking(pieces):
    items = run("Let me look.\n" + CALL + "\nDone <tool", pieces)
    assert answer_text(items) == "Let me look.\n\nDone <tool"
    kinds = [type(i) for i in items if not isinstance(i, str)]
    assert kinds == [ToolCallStarted, ToolCallDelta, ToolCallFinished]
    started, delta, finished = (i for i in items if not isinstance(i, str))
    assert (started.index, started.id, started.name) == (0, "call_0", "get_weather")
    assert json.loads(delta.arguments) == {"city": "Paris"}
    assert finished.call.arguments_dict() == {"city": "Paris"}


def test_text_that_only_looks_like_a_marker_start_is_released_once_decided():
    stream = CallStream(JSON_TOOLS, (WEATHER,))
    assert stream.feed("a <tool") == ["a "]  # held: could be a call
    assert stream.holding
    assert stream.feed("s are") == ["<tools are"]
    assert not stream.holding


def test_parallel_calls_get_their_own_indexes():
    items = run(CALL + "\n" + CALL.replace("Paris", "Oslo"), 7)
    finished = [i for i in items if isinstance(i, ToolCallFinished)]
    assert [f.index for f in finished] == [0, 1]
    assert [f.call.arguments_dict()["city"] for f in finished] == ["Paris", "Oslo"]
    assert len({f.call.id for f in finished}) == 2


def test_without_parallel_calls_a_second_call_is_dropped_with_a_note():
    stream = CallStream(JSON_TOOLS, (WEATHER,), max_calls=1)
    items = stream.feed(CALL + CALL.replace("Paris", "Oslo")) + stream.close()
    finished = [i for i in items if isinstance(i, ToolCallFinished)]
    assert [f.call.arguments_dict()["city"] for f in finished] == ["Paris"]
    assert "dropped" in stream.malformed[0].reason
    assert answer_text(items) == ""


def test_a_malformed_call_comes_back_as_text_with_a_note():
    bad = '<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>'
    items = run("x" + bad, 3)
    assert answer_text(items) == "x" + bad
    notes = [i for i in items if isinstance(i, MalformedCall)]
    assert len(notes) == 1 and "could not be used" in notes[0].reason


def test_a_call_to_a_function_not_offered_is_malformed():
    items = run(CALL.replace("get_weather", "rm_rf"), 4)
    assert not [i for i in items if isinstance(i, ToolCallFinished)]
    assert "not one of the offered tools" in items[-1].reason


def test_a_reply_ending_inside_a_call_is_parsed_if_it_can_be():
    items = run(CALL[: -len("</tool_call>")], 6)
    assert [type(i) for i in items][-1] is ToolCallFinished
    cut = run(CALL[:30], 6)
    assert isinstance(cut[-1], MalformedCall)
    assert "ended inside it" in cut[-1].reason
    assert answer_text(cut) == CALL[:30]


def test_a_reply_cut_at_its_token_limit_inside_a_call_makes_no_call():
    # Whole but for its end marker: a stop would parse it; the token limit does not
    # (a lenient parser reads an unfinished call as one with fewer arguments).
    stream = CallStream(JSON_TOOLS, (WEATHER,))
    items = stream.feed(CALL[: -len("</tool_call>")]) + stream.close(cut=True)
    assert not [i for i in items if isinstance(i, ToolCallFinished)]
    assert "token limit" in items[-1].reason
    assert answer_text(items) == CALL[: -len("</tool_call>")]


def test_other_formats_use_their_own_parser():
    fmt = CallFormat(
        "qwen3_coder",
        qwen3_coder.tool_call_start,
        qwen3_coder.tool_call_end,
        qwen3_coder.parse_tool_call,
    )
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    items = run(text, 5, fmt=fmt)
    (finished,) = [i for i in items if isinstance(i, ToolCallFinished)]
    assert finished.call.arguments_dict() == {"city": "Rome"}
    assert answer_text(items) == ""


MISTRAL = CallFormat(
    "mistral",
    mistral.tool_call_start,
    mistral.tool_call_end,
    mistral.parse_tool_call,
)


@pytest.mark.parametrize(
    "text",
    [
        # Devstral, Magistral, Mistral Small 3.2: a header per call.
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}'
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}',
        # Mistral Small 3.1 (tests/data/templates: llama.cpp's copy): a JSON list.
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome"}, '
        '"id": "abcdefghi"}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]',
    ],
)
def test_mistral_calls_have_no_end_marker_and_run_to_the_end_of_the_reply(text):
    items = run("Let me look. " + text, 7, fmt=MISTRAL)
    finished = [i.call for i in items if isinstance(i, ToolCallFinished)]
    assert [c.arguments_dict()["city"] for c in finished] == ["Rome", "Oslo"]
    assert answer_text(items) == "Let me look. "
    # Without parallel calls the second is dropped, with a note.
    stream = CallStream(MISTRAL, (WEATHER,), max_calls=1)
    items = stream.feed(text) + stream.close()
    assert len([i for i in items if isinstance(i, ToolCallFinished)]) == 1
    assert "dropped" in stream.malformed[0].reason
    # Cut at the token limit: no call.
    stream = CallStream(MISTRAL, (WEATHER,))
    items = stream.feed(text[:40]) + stream.close(cut=True)
    assert not stream.calls and answer_text(items) == text[:40]


def test_harmony_commentary_calls_parse_both_ways_round():
    from app.core.tools.harmony import harmony_format

    fmt = harmony_format({"<|channel|>": 1, "<|message|>": 2, "<|call|>": 3})
    assert fmt is not None and harmony_format({"<|im_end|>": 1}) is None
    recipient_in_channel = (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Oslo"}<|call|>'
    )
    items = run(recipient_in_channel, 4, fmt=fmt)
    (finished,) = [i for i in items if isinstance(i, ToolCallFinished)]
    assert finished.call.name == "get_weather"
    assert finished.call.arguments_dict() == {"city": "Oslo"}
    # The recipient after the role; generation stops at <|call|> (an end token),
    # so the reply ends inside the call.
    after_role = (
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Rome"}'
    )
    items = run(after_role, 3, fmt=fmt)
    (finished,) = [i for i in items if isinstance(i, ToolCallFinished)]
    assert finished.call.arguments_dict() == {"city": "Rome"}
    assert answer_text(items) == " "
