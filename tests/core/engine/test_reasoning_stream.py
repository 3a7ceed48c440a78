"""The engine splits a reply into reasoning and answer, and holds thinking to a budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.engine.engine import Engine
from app.core.engine.events import GenerationEvent
from app.core.engine.reasoning_stream import MARKER, ReasoningSplitter
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.reasoning.markers import ReasoningFormat
from app.core.reasoning.thinking import ThinkingSettings
from app.core.turn.parts import ANSWER, REASONING

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"
THINK = ReasoningFormat(
    style="think", start="<think>", end="</think>", start_ids=(9,), end_ids=(8,)
)
HARMONY = ReasoningFormat(
    style="harmony",
    start_ids=(20, 21, 22),
    end_ids=(23,),
    answer_ids=((24, 25, 20, 26, 22), (20, 26, 22)),
)


def _routes(fmt, prompt, ids):
    splitter = ReasoningSplitter(fmt, prompt)
    routed = [r for token in ids for r in splitter.feed(token)] + splitter.flush()
    return [(r.channel, list(r.ids)) for r in routed], splitter


def test_think_markers_route_reasoning_then_answer():
    routes, splitter = _routes(THINK, [1], [9, 40, 41, 8, 5, 6])
    assert routes == [
        (MARKER, [9]),
        (REASONING, [40]),
        (REASONING, [41]),
        (MARKER, [8]),
        (ANSWER, [5]),
        (ANSWER, [6]),
    ]
    assert splitter.reasoning_tokens == 3  # two thoughts and the end marker


def test_bad_markers_are_plain_text():
    # An end marker with no reasoning open, and a start marker after the answer.
    routes, _ = _routes(THINK, [1], [5, 8, 9, 6])
    assert routes == [(ANSWER, [5]), (ANSWER, [8]), (ANSWER, [9]), (ANSWER, [6])]


def test_a_prompt_that_opens_reasoning_starts_the_reply_inside_it():
    routes, _ = _routes(THINK, [1, 9, 10], [40, 8, 5])
    assert routes == [(REASONING, [40]), (MARKER, [8]), (ANSWER, [5])]


def test_harmony_channels_are_matched_across_tokens():
    ids = [20, 21, 22, 40, 41, 23, 24, 25, 20, 26, 22, 5]
    routes, _ = _routes(HARMONY, [1], ids)
    assert routes == [
        (MARKER, [20, 21, 22]),
        (REASONING, [40]),
        (REASONING, [41]),
        (MARKER, [23]),
        (MARKER, [24, 25, 20, 26, 22]),
        (ANSWER, [5]),
    ]
    # A token that only began a marker is released as text.
    routes, _ = _routes(HARMONY, [1], [20, 5])
    assert routes == [(ANSWER, [20, 5])]


@pytest.fixture(scope="module")
def r1_engine(thinking_model_dir):
    engine = Engine()
    engine.load(
        thinking_model_dir((TEMPLATES / "deepseek-r1-distill.jinja").read_text())
    )
    yield engine
    engine.shutdown()


def _turn(engine, key, budget, max_tokens):
    messages = [{"role": "user", "content": "Why is the sky blue?"}]
    handle = engine.chat(
        key,
        messages,
        KVSettings(),
        SamplingSettings(temperature=0.0, max_tokens=max_tokens, seed=0),
        thinking=ThinkingSettings(budget=budget),
    )
    events = [e for e in handle if isinstance(e, GenerationEvent)]
    return engine.render(messages, True), events


def test_the_budget_ends_reasoning_with_the_end_marker_and_the_model_answers(r1_engine):
    prompt, events = _turn(r1_engine, "budget", budget=6, max_tokens=20)
    final = events[-1]
    fmt = r1_engine.tokenizer.reasoning
    forced = r1_engine.tokenizer.encode(fmt.forced_end)
    # Six thoughts, then what Swapless wrote up to and including the end marker.
    assert final.reasoning_forced_end
    assert final.reasoning_tokens == 6 + forced.index(fmt.end_ids[0]) + 1
    channels = [e.channel for e in events[:-1] if e.text]
    assert channels[0] == REASONING and ANSWER in channels
    assert channels.index(ANSWER) > max(
        i for i, c in enumerate(channels) if c == REASONING
    )
    assert not any("</think>" in e.text for e in events)
    cached = r1_engine.cached_token_ids("budget")
    # The marker Swapless wrote is part of the reply the cache holds.
    reply = cached[len(prompt) :]
    assert fmt.end_ids[0] in reply
    assert final.generated_tokens == len(reply) or final.finish_reason == "stop"


def test_a_reply_cut_inside_reasoning_says_so(r1_engine):
    _, events = _turn(r1_engine, "cut", budget=0, max_tokens=5)
    final = events[-1]
    assert final.finish_reason == "length" and final.channel == REASONING
    assert not any(e.channel == ANSWER and e.text for e in events)
