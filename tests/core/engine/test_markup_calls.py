"""Forced and lazy calls in the markup formats, through the real engine.

Eight tiny random-weight models carry published chat templates (tests/data/templates):
Qwen3-Coder's, whose calls are XML parameters (mlx-lm's ``qwen3_coder`` parser),
GLM-4.6's, whose calls are ``<arg_key>``/``<arg_value>`` pairs (``glm47``), Mistral
Small 3.1's, a JSON list after ``[TOOL_CALLS]`` that ends with the reply (``mistral``),
LFM2.5's, whose calls are a Python list of calls (``pythonic``), Kimi K2 Thinking's,
JSON arguments between tag tokens (``kimi_k2``), Gemma 4's, its own notation with
``<|"|>`` strings (``gemma4``), MiniMax-M2's, XML ``<invoke>`` blocks after a prompt
that opens ``<think>`` (``minimax_m2``), and gpt-oss's harmony commentary-channel calls. mlx-lm
infers the format from the template (harmony: Swapless, from the vocabulary); the call
markers are special tokens as in the real vocabularies. Whatever the random weights sample, a forced call must be written in the
model's own format, be read back by mlx-lm's own parser, and validate against the
tool's schema.
"""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from app.core.engine.engine import Engine
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.tools.tool_specs import ToolChoice, parse_tools
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import REASONING, ToolCallFinished
from tests.core.engine.steering import steer_calls
from tests.core.tools.tool_model import make_tool_model

TEMPLATES = Path(__file__).parents[2] / "data" / "templates"
FORMATS = {
    "qwen3_coder": ("qwen3-coder.jinja", ("<tool_call>", "</tool_call>")),
    # GLM's vocabulary holds its argument tags as single tokens too.
    "glm47": (
        "glm-4.6.jinja",
        (
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
        ),
    ),
    # No end marker: a call runs to the end of the reply.
    "mistral": ("mistral-small-3.1.jinja", ("[TOOL_CALLS]",)),
    "pythonic": ("lfm2.5.jinja", ("<|tool_call_start|>", "<|tool_call_end|>")),
    # Kimi K2's call tags are all tokens of their own.
    "kimi_k2": (
        "kimi-k2-thinking.jinja",
        (
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
        ),
    ),
    # Gemma 4's string delimiter is one token; so are its turn and channel tags.
    "gemma4": (
        "gemma4.jinja",
        (
            "<|tool_call>",
            "<tool_call|>",
            '<|"|>',
            "<|turn>",
            "<turn|>",
            "<|channel>",
            "<channel|>",
            "<|tool>",
            "<tool|>",
            "<|tool_response>",
            "<tool_response|>",
        ),
    ),
    # MiniMax-M2: its generation prompt opens <think>, which a forced call closes.
    "minimax_m2": (
        "minimax-m2.jinja",
        ("<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>"),
    ),
    # gpt-oss: no mlx-lm parser; Swapless reads harmony's commentary-channel calls.
    "harmony": (
        "gpt-oss.jinja",
        (
            "<|channel|>",
            "<|message|>",
            "<|call|>",
            "<|start|>",
            "<|end|>",
            "<|return|>",
            "<|constrain|>",
        ),
    ),
}
BOOK = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "nights": {"type": "integer", "minimum": 1, "maximum": 9},
        "breakfast": {"type": "boolean"},
        # Typed: Gemma 4's template reads every property's type.
        "room": {"type": "string", "enum": ["single", "double"]},
        "notes": {"type": "string", "maxLength": 6},
    },
    "required": ["city", "nights", "room"],
    "additionalProperties": False,
}
TOOLS = parse_tools(
    [
        {"type": "function", "function": {"name": "book_hotel", "parameters": BOOK}},
        {"type": "function", "function": {"name": "ping"}},
    ]
)
MESSAGES = [{"role": "user", "content": "Book me a room in Porto."}]


@pytest.fixture(scope="module", params=sorted(FORMATS))
def markup_engine(request, tmp_path_factory):
    template_file, markers = FORMATS[request.param]
    template = (TEMPLATES / template_file).read_text(encoding="utf-8")
    folder = tmp_path_factory.mktemp("models") / request.param
    engine = Engine()
    engine.load(make_tool_model(folder, template, markers))
    yield request.param, engine
    engine.shutdown()


def calls_of(engine, key, turn, seed, max_tokens=160):
    sampling = SamplingSettings(
        temperature=1.0, top_p=1.0, max_tokens=max_tokens, seed=seed
    )
    items = list(engine.chat(key, MESSAGES, KVSettings(), sampling, tools=turn))
    text = "".join(
        e.text
        for e in items
        if type(e).__name__ == "GenerationEvent" and e.channel != REASONING
    )
    return [e.call for e in items if isinstance(e, ToolCallFinished)], text, items


def test_the_format_is_read_from_the_tokenizer_and_constrained(markup_engine):
    name, engine = markup_engine
    assert engine.tool_call_format().name == name
    assert engine.tool_call_format().constrained


@pytest.mark.parametrize("seed", range(3))
def test_a_named_markup_call_parses_and_validates_whatever_the_weights(
    markup_engine, seed
):
    name, engine = markup_engine
    turn = TurnTools(TOOLS, ToolChoice("named", "book_hotel"), parallel=False)
    calls, text, items = calls_of(engine, f"{name}-named-{seed}", turn, seed)
    assert [c.name for c in calls] == ["book_hotel"], text
    jsonschema.validate(calls[0].arguments_dict(), BOOK)
    assert text == ""  # the markup went out as a call, not as answer text
    assert items[-1].finish_reason == "stop"


@pytest.mark.parametrize("seed", range(2))
def test_a_required_markup_call_picks_an_offered_tool(markup_engine, seed):
    name, engine = markup_engine
    turn = TurnTools(TOOLS, ToolChoice("required"), parallel=True)
    # MiniMax writes all of a reply's calls in one block, which a random model fills
    # with up to 8 calls: a cut inside it would leave none to check.
    limit = 900 if name == "minimax_m2" else 300
    calls, text, items = calls_of(engine, f"{name}-req-{seed}", turn, seed, limit)
    assert calls, text
    if items[-1].finish_reason == "length" and text.strip():
        # Calls until the token limit: the unfinished last one went out as text.
        assert text.strip().startswith(FORMATS[name][1][0]), text
    else:
        assert text.strip() == ""  # at most the line breaks between calls
    for call in calls:
        schema = {t.name: t.parameters for t in TOOLS}[call.name]
        jsonschema.validate(call.arguments_dict(), schema or {"type": "object"})


@pytest.mark.parametrize("markup_engine", ["gemma4", "kimi_k2"], indirect=True)
@pytest.mark.parametrize("seed", range(2))
def test_an_auto_call_the_model_opens_is_kept_in_shape(
    markup_engine, monkeypatch, seed
):
    # Steered to open a call at once and to stop after its end marker; what comes
    # between is the random weights' own, under the format's lazy grammar.
    name, engine = markup_engine
    tokenizer = engine._require_model().tokenizer
    start, end = FORMATS[name][1][:2]
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (start, end)]
    steer_calls(monkeypatch, *ids, min(tokenizer.eos_token_ids))
    turn = TurnTools(TOOLS, ToolChoice("auto"), parallel=False)
    calls, text, items = calls_of(engine, f"{name}-auto-{seed}", turn, seed, 300)
    assert len(calls) == 1, text
    schema = {t.name: t.parameters for t in TOOLS}[calls[0].name]
    jsonschema.validate(calls[0].arguments_dict(), schema or {"type": "object"})
    assert items[-1].finish_reason == "stop"
