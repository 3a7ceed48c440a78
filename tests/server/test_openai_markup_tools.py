"""Acceptance: forced calls for a model that writes calls as XML parameters.

The served model is the tiny random-weight model with Qwen3-Coder's published chat
template (tests/data/templates/qwen3-coder.jinja): mlx-lm reads its calls with the
``qwen3_coder`` parser. Through the real `openai` client a named call comes back in
OpenAI's shape, with JSON-string arguments valid against the schema, and the call and
its result render back through the template on the next request.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from tokenizers import Tokenizer

from app.core.engine.engine import Engine
from tests.core.tools.tool_model import make_tool_model
from tests.server.test_openai_client import client_for

TEMPLATE = Path(__file__).parents[1] / "data" / "templates" / "qwen3-coder.jinja"
BOOK = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "nights": {"type": "integer", "minimum": 1, "maximum": 9},
        # Typed: Gemma 4's template reads every property's type.
        "room": {"type": "string", "enum": ["single", "double"]},
    },
    "required": ["city", "nights", "room"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book_hotel",
            "description": "Books a hotel room.",
            "parameters": BOOK,
        },
    }
]
MESSAGES = [{"role": "user", "content": "Book me two nights in Porto."}]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-qwen3-coder"
    return make_tool_model(folder, TEMPLATE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def engine(model_folder):
    engine = Engine()
    engine.load(model_folder)
    yield engine
    engine.shutdown()


def test_a_named_xml_call_streams_as_openai_tool_calls_and_renders_back(
    serve, make_preset, model_folder
):
    client = client_for(serve(make_preset(max_tokens=200)))
    before = client.chat.completions.create(
        model="swapless", messages=MESSAGES, tools=TOOLS, max_tokens=1
    ).usage.prompt_tokens
    stream = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        stream=True,
        tool_choice={"type": "function", "function": {"name": "book_hotel"}},
        parallel_tool_calls=False,
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert not "".join(d.content or "" for d in deltas)  # no XML as content
    assert calls[0].id and calls[0].function.name == "book_hotel"
    arguments = json.loads("".join(tc.function.arguments or "" for tc in calls))
    jsonschema.validate(arguments, BOOK)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {
                        "name": "book_hotel",
                        "arguments": json.dumps(arguments),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].id, "content": "Booked: #42."},
    ]
    second = client.chat.completions.create(
        model="swapless", messages=history, tools=TOOLS, max_tokens=4
    )
    # The call and its result are in the prompt, rendered as XML by the template.
    xml = "".join(
        f"<parameter={key}>\n{value}\n</parameter>\n"
        for key, value in arguments.items()
    )
    tokenizer = Tokenizer.from_file(str(model_folder / "tokenizer.json"))
    rendered = f"<function=book_hotel>\n{xml}</function>\nBooked: #42."
    grown = second.usage.prompt_tokens - before
    assert grown >= len(tokenizer.encode(rendered, add_special_tokens=False).ids)
