"""Acceptance: a model whose calls end with the reply (mistral's format), end to end.

The served model is the tiny random-weight model with Mistral Small 3.1's published
chat template (tests/data/templates/mistral-small-3.1.jinja): mlx-lm reads its calls
with the ``mistral`` parser, whose end marker is empty. Through the real `openai`
client a named call comes back in OpenAI's shape with JSON-string arguments valid
against the schema — never as ``[TOOL_CALLS]`` text — and the call and its result
render back through the template (which raises on tool-call ids under 9 characters
and on roles out of turn) on the next request.
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
from tests.server.test_openai_markup_tools import BOOK, MESSAGES, TOOLS

TEMPLATE = Path(__file__).parents[1] / "data" / "templates" / "mistral-small-3.1.jinja"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-mistral"
    return make_tool_model(
        folder, TEMPLATE.read_text(encoding="utf-8"), markers=("[TOOL_CALLS]",)
    )


@pytest.fixture(scope="module")
def engine(model_folder):
    engine = Engine()
    engine.load(model_folder)
    yield engine
    engine.shutdown()


@pytest.mark.parametrize("stream", [False, True])
def test_a_named_mistral_call_comes_back_as_a_tool_call_and_renders_back(
    serve, make_preset, model_folder, stream
):
    client = client_for(serve(make_preset(max_tokens=200)))
    before = client.chat.completions.create(
        model="swapless", messages=MESSAGES, tools=TOOLS, max_tokens=1
    ).usage.prompt_tokens
    asked = client.chat.completions.create(
        model="swapless",
        messages=MESSAGES,
        tools=TOOLS,
        stream=stream,
        tool_choice={"type": "function", "function": {"name": "book_hotel"}},
        parallel_tool_calls=False,
    )
    if stream:
        chunks = list(asked)
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        content = "".join(d.content or "" for d in deltas)
        calls = [tc for d in deltas for tc in (d.tool_calls or [])]
        call_id, name = calls[0].id, calls[0].function.name
        arguments = "".join(tc.function.arguments or "" for tc in calls)
        finish = chunks[-1].choices[0].finish_reason
    else:
        message = asked.choices[0].message
        content = message.content or ""
        (call,) = message.tool_calls
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
        finish = asked.choices[0].finish_reason
    assert "TOOL_CALLS" not in content and not content.strip()
    assert name == "book_hotel" and len(call_id) >= 9
    jsonschema.validate(json.loads(arguments), BOOK)
    assert finish == "tool_calls"

    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": "Booked: #42."},
    ]
    second = client.chat.completions.create(
        model="swapless", messages=history, tools=TOOLS, max_tokens=4
    )
    # The call (its JSON arguments) and the result are in the prompt: the template
    # rendered them without raising on the ids or the roles.
    tokenizer = Tokenizer.from_file(str(model_folder / "tokenizer.json"))
    rendered = arguments + "Booked: #42."
    grown = second.usage.prompt_tokens - before
    assert grown >= len(tokenizer.encode(rendered, add_special_tokens=False).ids)
