"""A model that calls a tool by itself, through the real `openai` client.

What a user of an agent client needs from a model: given a tool and a question, it
writes the call with the argument copied from the question, and answers from the
tool's result. Nothing here is steered or fed in: greedy generation by the shipped
reference model's real weights through `swapless serve`, parsed by mlx-lm's parser for
the model's own format, sent back as OpenAI's ``tool_calls``.

The shipped reference model learned it in its tool stage (docs/reference-model.md);
under ``tool_choice`` auto Swapless constrains a call only once the model opens it, so
the choice to call, the value and the answer are the model's own.
"""

from __future__ import annotations

import json

import pytest

from app.core.engine.engine import Engine
from app.core.modelkit.reference.install import install_reference_model
from tests.server.test_openai_client import client_for

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    engine = Engine()
    engine.load(install_reference_model(tmp_path_factory.mktemp("m") / "reference"))
    yield engine
    engine.shutdown()


@pytest.mark.parametrize("thinking", [False, True])
def test_the_model_calls_the_tool_and_answers_from_its_result(
    serve, make_preset, engine, thinking
):
    server = serve(make_preset(max_tokens=90, thinking=thinking, system_prompt=""))
    client = client_for(server)
    model = server.status().model
    messages: list[dict] = [
        {"role": "user", "content": 'What is the weather in "Coimbra"?'}
    ]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    (call,) = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Coimbra"}
    messages.append(choice.message.model_dump(exclude_none=True))
    result = "It is raining in Coimbra, 12 degrees."
    messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    second = client.chat.completions.create(
        model=model, messages=messages, tools=[WEATHER]
    )
    answer = second.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "12 degrees" in (answer.message.content or "")
