"""Acceptance: forced calls for Gemma 4, gpt-oss, Kimi K2 and MiniMax-M2, through the
`openai` client.

Each served model is the tiny random-weight model with the published chat template of
its family (tests/data/templates) and the family's tags as tokens of their own. A
named call streams back in OpenAI's shape, with JSON-string arguments valid against
the schema and no markup as content; the call and its result render back through the
template on the next request, the call as the grammar wrote it (the grammar writes it
as the template does, so a model that picks the usual tokens gets the cache reused). A schema Gemma 4's notation cannot enforce,
and a format without a grammar, are refused with a 400 in words.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import openai
import pytest
from tokenizers import Tokenizer

from app.core.engine.engine import Engine
from tests.core.engine.test_markup_calls import FORMATS
from tests.core.tools.tool_model import make_tool_model
from tests.server.test_openai_client import client_for
from tests.server.test_openai_markup_tools import BOOK, MESSAGES, TOOLS

TEMPLATES = Path(__file__).parents[1] / "data" / "templates"
NAMED = {"type": "function", "function": {"name": "book_hotel"}}


@pytest.fixture(scope="module", params=["gemma4", "harmony", "kimi_k2", "minimax_m2"])
def engine(request, tmp_path_factory):
    template_file, markers = FORMATS[request.param]
    folder = tmp_path_factory.mktemp("models") / request.param
    template = (TEMPLATES / template_file).read_text(encoding="utf-8")
    engine = Engine()
    engine.load(make_tool_model(folder, template, markers))
    engine.format_name, engine.folder = request.param, folder
    yield engine
    engine.shutdown()


def test_a_named_call_streams_as_openai_tool_calls_and_renders_back(
    serve, make_preset, engine
):
    client = client_for(serve(make_preset(max_tokens=200)))
    stream = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        stream=True,
        tool_choice=NAMED,
        parallel_tool_calls=False,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert not "".join(d.content or "" for d in deltas)  # no markup as content
    assert calls[0].id and calls[0].function.name == "book_hotel"
    arguments_text = "".join(tc.function.arguments or "" for tc in calls)
    arguments = json.loads(arguments_text)
    jsonschema.validate(arguments, BOOK)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] == "tool_calls"
    usage = chunks[-1].usage
    first_prompt = usage.prompt_tokens
    asked_and_answered = usage.prompt_tokens + usage.completion_tokens

    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {"name": "book_hotel", "arguments": arguments_text},
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].id, "content": "Booked: #42."},
    ]
    second = client.chat.completions.create(
        model="swapless", messages=history, tools=TOOLS, max_tokens=2
    )
    # The next prompt renders the call as the grammar wrote it, and the server
    # reused at least the whole first prompt from the cache.
    ids = engine.tokenizer.render(
        [*history[:1], {**history[1], "tool_calls": [call_dict(calls[0], arguments)]}],
        add_generation_prompt=False,
        tools=TOOLS,
    )
    rendered = Tokenizer.from_file(str(engine.folder / "tokenizer.json")).decode(
        ids, skip_special_tokens=False
    )
    assert written_call(engine.format_name, arguments, calls[0].id) in rendered
    reused = second.model_extra["swapless"]["reused_tokens"]
    # MiniMax's generation prompt ends in "<think>\n", which its history does not
    # render before a reply without reasoning: the cache matches up to there.
    opened = 3 if engine.format_name == "minimax_m2" else 0
    assert first_prompt - opened <= reused <= asked_and_answered, (
        reused,
        first_prompt,
    )


def call_dict(call, arguments):
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.function.name, "arguments": arguments},
    }


def written_call(format_name: str, arguments: dict, call_id: str) -> str:
    """The call as each format's grammar writes it."""
    as_json = json.dumps(arguments)
    if format_name == "harmony":
        return f" to=functions.book_hotel<|channel|>commentary json<|message|>{as_json}"
    if format_name == "minimax_m2":
        params = "".join(
            f'<parameter name="{k}">{v}</parameter>\n' for k, v in arguments.items()
        )
        return f'<minimax:tool_call>\n<invoke name="book_hotel">\n{params}</invoke>\n'
    if format_name == "kimi_k2":
        return f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{as_json}"
    quote = '<|"|>'
    pairs = ",".join(
        f"{k}:{quote}{v}{quote}" if isinstance(v, str) else f"{k}:{json.dumps(v)}"
        for k, v in sorted(arguments.items())
    )
    return f"<|tool_call>call:book_hotel{{{pairs}}}<tool_call|>"


@pytest.mark.parametrize("engine", ["gemma4"], indirect=True)
def test_a_schema_gemma4_cannot_enforce_is_a_400_in_words(serve, make_preset, engine):
    client = client_for(serve(make_preset(max_tokens=20)))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "t",
                "parameters": {
                    "type": "object",
                    # Typed: Gemma 4's template reads every property's type.
                    "properties": {
                        "a": {"type": "string", "allOf": [{"minLength": 1}]}
                    },
                },
            },
        }
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="swapless", messages=MESSAGES, tools=tools, tool_choice="required"
        )
    error = caught.value.body
    assert "'allOf' cannot be enforced" in error["message"]
    assert error["code"] == "tool_choice_not_supported"
    # Under auto the same tools are taken (a call would be parsed, not constrained).
    reply = client.chat.completions.create(
        model="swapless", messages=MESSAGES, tools=tools, max_tokens=2
    )
    assert reply.choices[0].finish_reason in ("length", "stop", "tool_calls")
    # A call named to a tool the notation can carry is enforced beside it.
    named = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=[*TOOLS, *tools],
        tool_choice=NAMED,
        parallel_tool_calls=False,
        max_tokens=200,
    )
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "book_hotel"
    jsonschema.validate(json.loads(call.function.arguments), BOOK)
