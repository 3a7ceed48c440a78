"""Calls under ``auto`` are constrained once the model opens one (the lazy grammar).

The random-weight tool model is steered (`tests.core.engine.steering`) to write its
start marker first and end-of-sequence after an end marker; everything in between is
sampled at temperature 1 from random weights. With the lazy grammar the call parses
and its arguments validate; without it (the control) the same steering gives markup
that does not parse.
"""

from __future__ import annotations

import jsonschema
import pytest

from app.core.engine.engine import Engine
from app.core.engine.lazy_call import CALL, FREE, SPENT, LazyCallProcessor
from app.core.engine.tool_hooks import ll_tokenizer
from app.core.reasoning.markers import NO_REASONING
from app.core.tools.call_stream import MalformedCall
from app.core.tools.grammar import Marker, lazy_call_grammar
from app.core.tools.tool_specs import ToolChoice
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import ToolCallFinished
from tests.core.engine.steering import steer_calls
from tests.core.engine.test_tool_hooks import MESSAGES, TOOLS, events, text_of
from tests.core.tools.tool_model import make_tool_model


@pytest.fixture(scope="module")
def tool_engine(tmp_path_factory):
    engine = Engine()
    engine.load(make_tool_model(tmp_path_factory.mktemp("models") / "tiny-tools"))
    yield engine
    engine.shutdown()


@pytest.fixture
def markers(tool_engine):
    tokenizer = tool_engine._require_model().tokenizer
    start, end = (
        tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>")
    )
    return start, end, min(tokenizer.eos_token_ids)


@pytest.mark.parametrize("seed", range(4))
def test_an_auto_call_the_model_opens_parses_and_validates(
    tool_engine, markers, monkeypatch, seed
):
    steer_calls(monkeypatch, *markers)
    turn = TurnTools(TOOLS, ToolChoice("auto"), parallel=False)
    items = events(tool_engine, f"lazy{seed}", turn, seed, max_tokens=300)
    calls = [e.call for e in items if isinstance(e, ToolCallFinished)]
    assert len(calls) == 1, text_of(items)
    schema = {t.name: t.parameters for t in TOOLS}[calls[0].name]
    jsonschema.validate(calls[0].arguments_dict(), schema)
    assert not [e for e in items if isinstance(e, MalformedCall)]
    assert items[-1].finish_reason == "stop"


def test_without_the_lazy_grammar_the_same_steering_gives_a_broken_call(
    tool_engine, markers, monkeypatch
):
    steer_calls(monkeypatch, *markers, lazy=False)
    turn = TurnTools(TOOLS, ToolChoice("auto"), parallel=False)
    items = events(tool_engine, "unconstrained", turn, 0, max_tokens=60)
    assert not [e for e in items if isinstance(e, ToolCallFinished)]
    assert [e for e in items if isinstance(e, MalformedCall)]


def test_tool_choice_none_never_calls_even_when_the_model_tries(
    tool_engine, markers, monkeypatch
):
    steer_calls(monkeypatch, *markers)
    none = TurnTools(TOOLS, ToolChoice("none"))
    items = events(tool_engine, "none", none, 0, max_tokens=24)
    assert not [e for e in items if isinstance(e, ToolCallFinished | MalformedCall)]
    assert "<tool_call>" not in text_of(items)
    # The tools are not shown: the prompt is the one without tools.
    plain = tool_engine.render(MESSAGES, True, None)
    assert items[-1].prompt_tokens == len(plain)


def test_the_state_machine_on_text_markers(tool_engine):
    """A marker written as several text pieces triggers too; the bytes after it in the
    same token start the call; a parallel-off reply is spent after one call."""
    tokenizer = tool_engine._require_model().tokenizer
    lltok = ll_tokenizer(tokenizer)
    grammar = lazy_call_grammar(TOOLS, end=Marker("END"))
    processor = LazyCallProcessor(
        lltok,
        grammar,
        Marker("CALL:"),
        vocab_size=lltok.vocab_size,
        reasoning=NO_REASONING,
        max_calls=1,
    )
    for token in lltok.tokenize_str("Let me check. CALL"):
        processor.feed(token)
    assert processor.state == FREE
    # The token that completes the marker also holds the call's first byte.
    (token,) = lltok.tokenize_str(":\n")
    processor.feed(token)
    assert processor.state == CALL
    body = '{"name": "get_time", "arguments": {"zone": "UTC"}}\n'
    for token in lltok.tokenize_str(body):
        processor.feed(token)
        assert processor.state == CALL
    assert not processor.fill_mask()[min(tokenizer.eos_token_ids)]  # no end yet
    for token in lltok.tokenize_str("END"):
        processor.feed(token)
    assert (processor.state, processor.calls, processor.abandoned) == (SPENT, 1, 0)


def test_a_prompt_ending_in_the_marker_starts_inside_the_call(tool_engine, markers):
    tokenizer = tool_engine._require_model().tokenizer
    lltok = ll_tokenizer(tokenizer)
    start, end, _ = markers
    processor = LazyCallProcessor(
        lltok,
        lazy_call_grammar(TOOLS, end=Marker("</tool_call>", end)),
        Marker("<tool_call>", start),
        vocab_size=lltok.vocab_size,
        reasoning=NO_REASONING,
        prompt_ids=[5, 6, start],
    )
    assert processor.state == CALL
    allowed = processor.fill_mask()
    assert allowed.sum() == 1 and allowed[tokenizer.encode("\n")[0]]
