"""A constrained reply whose prompt opens reasoning closes it first.

QwQ's published template (like DeepSeek-R1-Distill's and Qwen3-2507 Thinking's) ends
the generation prompt with ``<think>\\n``: the model starts inside its reasoning. A
forced call or a JSON-schema answer constrained from the first token would then be
written inside the reasoning, where no call is parsed and no answer is given — which
is what happened before 2026-12-03 (a named call came back as reasoning text, with no
call and ``finish_reason: stop``). The engine now writes the reasoning's end marker
first (`TurnHooks.closes_reasoning`), so the call or the JSON is the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from app.core.engine.engine import Engine
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.tools.tool_specs import ToolChoice
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import REASONING, ToolCallFinished
from tests.core.engine.test_markup_calls import BOOK, MESSAGES, TOOLS
from tests.core.tools.tool_model import make_tool_model

TEMPLATE = Path(__file__).parents[2] / "data" / "templates" / "qwq.jinja"


@pytest.fixture(scope="module")
def qwq_engine(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models") / "tiny-qwq"
    markers = ("<tool_call>", "</tool_call>", "<think>", "</think>")
    engine = Engine()
    engine.load(make_tool_model(folder, TEMPLATE.read_text(encoding="utf-8"), markers))
    yield engine
    engine.shutdown()


def run(engine, key, turn, seed):
    sampling = SamplingSettings(temperature=1.0, top_p=1.0, max_tokens=200, seed=seed)
    items = list(engine.chat(key, MESSAGES, KVSettings(), sampling, tools=turn))
    texts = [e for e in items if type(e).__name__ == "GenerationEvent"]
    answer = "".join(e.text for e in texts if e.channel != REASONING)
    reasoning = "".join(e.text for e in texts if e.channel == REASONING)
    calls = [e.call for e in items if isinstance(e, ToolCallFinished)]
    return calls, answer, reasoning, items[-1].finish_reason


def test_the_prompt_opens_reasoning(qwq_engine):
    ids = qwq_engine.tokenizer.render(MESSAGES)
    assert qwq_engine.tokenizer.reasoning.start_ids[0] in ids[-3:]


@pytest.mark.parametrize("seed", range(2))
def test_a_named_call_is_the_answer_not_reasoning(qwq_engine, seed):
    turn = TurnTools(TOOLS, ToolChoice("named", "book_hotel"), parallel=False)
    calls, answer, reasoning, finish = run(qwq_engine, f"named-{seed}", turn, seed)
    assert [c.name for c in calls] == ["book_hotel"], (answer, reasoning)
    jsonschema.validate(calls[0].arguments_dict(), BOOK)
    assert "<tool_call>" not in reasoning and not reasoning.strip()
    assert finish == "stop"


def test_a_json_schema_answer_is_the_answer_not_reasoning(qwq_engine):
    turn = TurnTools((), ToolChoice("none"), response_schema=BOOK)
    calls, answer, reasoning, finish = run(qwq_engine, "schema", turn, 0)
    assert not calls and not reasoning.strip()
    jsonschema.validate(json.loads(answer), BOOK)
