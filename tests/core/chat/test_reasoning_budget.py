"""The thinking budget is room of its own, and every check counts it.

A reply of a reasoning model that thinks with a budget may take ``max_tokens`` for its
answer plus the budget for its thought (`app.core.reasoning.thinking.reply_room`): the
engine lets it, the budget check before a turn reserves it, the context meter leaves
room for it, and ``doctor`` says so for a preset. Real engines on tiny random-weight
models: the thinking model (QwQ's template opens the reasoning; Qwen3's has the
``enable_thinking`` switch) and the plain tiny model (no reasoning).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.chat.conversation_session import ConversationSession
from app.core.chat.sessions import SessionRegistry
from app.core.doctor.doctor_thinking import format_thinking, thinking_section
from app.core.engine.engine import Engine
from app.core.errors import BudgetError
from app.core.presets.generation_settings import KVSettings, SamplingSettings
from app.core.presets.presets import get_preset
from app.core.reasoning.markers import NO_REASONING, ReasoningFormat
from app.core.reasoning.thinking import ThinkingSettings, reply_room

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"


@pytest.fixture(scope="module")
def qwq(thinking_model_dir):
    engine = Engine()
    engine.load(thinking_model_dir((TEMPLATES / "qwq.jinja").read_text()))
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def qwen3(thinking_model_dir):
    engine = Engine()
    engine.load(thinking_model_dir((TEMPLATES / "qwen3.jinja").read_text()))
    yield engine
    engine.shutdown()


def test_reply_room_adds_the_budget_only_where_the_model_thinks():
    think = ReasoningFormat(style="think", switch="enable_thinking")
    harmony = ReasoningFormat(style="harmony", switch="reasoning_effort")
    on, off = ThinkingSettings(budget=100), ThinkingSettings(enabled=False, budget=100)
    assert reply_room(50, on, think) == 150
    assert reply_room(50, ThinkingSettings(), think) == 50  # no budget: shared
    assert reply_room(50, off, think) == 50  # thinking off through the switch
    assert reply_room(50, off, harmony) == 150  # harmony's lowest effort still thinks
    assert reply_room(50, on, NO_REASONING) == 50
    assert reply_room(50, None, think) == 50


def test_a_thought_cut_by_its_budget_leaves_the_answer_its_max_tokens(qwq):
    handle = qwq.chat(
        "room",
        [{"role": "user", "content": "Why is the sky blue?"}],
        KVSettings(),
        SamplingSettings(temperature=0.0, max_tokens=12, seed=0),
        thinking=ThinkingSettings(budget=6),
    )
    final = handle.wait()
    # Random weights never stop: the reply runs to its whole room, 12 + 6.
    assert final.finish_reason == "length"
    assert final.reasoning_forced_end
    assert final.generated_tokens == 12 + 6
    # The answer got max_tokens less the end marker Swapless wrote into its room.
    assert final.generated_tokens - final.reasoning_tokens >= 12 - 4


def _preset(**changes):
    settings = {
        "system_prompt": "You are brief.",
        "temperature": 0.0,
        "max_context": 256,
        "auto_trim": False,
        "max_tokens": 150,
        "thinking_budget": 0,
    }
    return get_preset("chat").with_changes(**{**settings, **changes})


def test_the_budget_check_counts_the_thinking_budget(qwq, store):
    # The prompt (under 100 tokens) and max_tokens fit in 256; with the thinking
    # budget they do not.
    session = ConversationSession.start(
        qwq, store, _preset(thinking_budget=100), model="qwq"
    )
    with pytest.raises(BudgetError, match=r"\+ 250 reply tokens"):
        session.send("Hello").wait()
    # Without a budget the same turn proceeds (reasoning shares max_tokens).
    session = ConversationSession.start(qwq, store, _preset(), model="qwq")
    assert session.send("Hello").wait().generated_tokens > 0


def test_thinking_off_or_no_reasoning_reserves_max_tokens_only(qwen3, engine, store):
    off = _preset(thinking=False, thinking_budget=100)
    session = ConversationSession.start(qwen3, store, off, model="qwen3")
    assert session.send("Hello").wait().generated_tokens > 0
    session = ConversationSession.start(engine, store, off, model="tiny")
    assert session.send("Hello").wait().generated_tokens > 0


def test_the_context_meter_leaves_room_for_the_budget(qwq, engine, store):
    with_budget = _preset(max_context=4096, thinking_budget=300)
    without = _preset(max_context=4096)
    meter = SessionRegistry(qwq, store)
    a, b = meter.new_chat_state(with_budget), meter.new_chat_state(without)
    assert (a.reply_tokens, b.reply_tokens) == (450, 150)
    assert b.next_trim_at - a.next_trim_at == 300
    # A model that does not reason: the budget reserves nothing.
    plain = SessionRegistry(engine, store).new_chat_state(with_budget)
    assert plain.reply_tokens == 150
    # A stored conversation's meter counts it too.
    session = meter.start(with_budget)
    assert meter.context_state(session.conversation_id).reply_tokens == 450


def test_doctor_states_the_presets_thinking_and_its_room(
    thinking_model_dir, tiny_model_dir
):
    preset = get_preset("chat").with_changes(max_tokens=512, thinking_budget=384)
    section = thinking_section(preset, thinking_model_dir())
    assert section["model_reasons"] is True
    assert section["switch"] == "enable_thinking"
    assert (section["thinking"], section["budget"]) == (True, 384)
    assert section["reply_tokens"] == 896
    text = "\n".join(format_thinking(section, lambda label, value: f"{label}: {value}"))
    assert "Thinking budget: 384 tokens" in text
    assert "Reply room: 896 tokens (max_tokens 512 + thinking budget 384)" in text
    plain = thinking_section(preset, tiny_model_dir)
    assert plain["model_reasons"] is False and plain["reply_tokens"] == 512
    off = thinking_section(preset.with_changes(thinking=False), thinking_model_dir())
    assert off["thinking"] is False and off["reply_tokens"] == 512
