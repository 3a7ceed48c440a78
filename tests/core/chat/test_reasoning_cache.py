"""cache == render(history): after every reply the cache holds what the template renders.

For each template of tests/data/templates (see its README for where each comes from),
on the tiny thinking model (random weights): three turns of a stored conversation; after
each, the conversation's cache must be a prefix of the template's rendering of the
history for the next turn, and the next turn must reuse all of it. Templates whose
prompt opens the reasoning (QwQ, DeepSeek-R1-Distill) get a thinking budget, so every
reply has a reasoning span for the cut to remove; Qwen3 with thinking off has the empty
block its generation prompt writes, which its own rendering of the history drops.

Every cache kind: unquantized, 8- and 4-bit, aged (the cut is a splice on each), and
the kinds that cannot drop entries from the middle — sliding-window layers (Gemma 3)
and hybrid recurrent layers (LFM2) — where the cache keeps only the prefix before the
reasoning, the next turn re-prefills the answer, and the turn report says why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.chat.conversation_session import ConversationSession
from app.core.engine.engine import Engine
from app.core.presets.presets import get_preset
from app.core.reasoning.history import NEXT_TURN_PLACEHOLDER

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"
HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>")
DEEPSEEK = ("<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>")
GEMMA4 = (
    "<|turn>",
    "<turn|>",
    "<|channel>",
    "<channel|>",
    "<|think|>",
    "<|tool>",
    "<tool|>",
    "<|tool_call>",
    "<tool_call|>",
    "<|tool_response>",
    "<tool_response|>",
    '<|"|>',
)

CASES = {
    # name: (template file, extra tokens, thinking on, reasoning is cut every turn)
    "qwen3-thinking-off": ("qwen3.jinja", (), False, True),
    "qwen3-thinking-on": ("qwen3.jinja", (), True, False),
    "qwq": ("qwq.jinja", (), True, True),
    "deepseek-r1-distill": ("deepseek-r1-distill.jinja", DEEPSEEK, True, True),
    "gpt-oss": ("gpt-oss.jinja", HARMONY, True, False),
    # Gemma 4 drops every thought channel from history; with thinking off its prompt
    # ends in an empty one, which the cut takes out of the cache after each reply.
    "gemma4-thinking-off": ("gemma4.jinja", GEMMA4, False, True),
}


@pytest.fixture(scope="module")
def engines(thinking_model_dir):
    made: dict[str, Engine] = {}

    def get(template: str, extra: tuple[str, ...]) -> Engine:
        if template not in made:
            engine = Engine()
            text = (TEMPLATES / template).read_text()
            # Gemma 4's tokenizer has its channel tokens and no <think>.
            own_markers = template == "gemma4.jinja"
            engine.load(thinking_model_dir(text, extra, think_tokens=not own_markers))
            made[template] = engine
        return made[template]

    yield get
    for engine in made.values():
        engine.shutdown()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cache_equals_the_rendered_history_after_every_turn(engines, store, case):
    template, extra, thinking, always_cut = CASES[case]
    engine = engines(template, extra)
    preset = get_preset("chat").with_changes(
        system_prompt="You are brief.",
        temperature=0.0,
        max_tokens=24,
        thinking=thinking,
        thinking_budget=8,
    )
    session = ConversationSession.start(engine, store, preset, model=case)
    held_before = 0
    for turn in range(3):
        report = session.send(f"Question {turn}: what is {turn} + {turn}?").wait()
        if turn:
            # The new prompt reuses everything the cache held after the last reply.
            assert report.reused_tokens == held_before
        cached = engine.cached_token_ids(session.cache_key)
        messages = session.model_messages(session.context(), NEXT_TURN_PLACEHOLDER)
        rendered = engine.render(messages, False, thinking=preset.thinking_settings())
        assert rendered[: len(cached)] == cached, case
        assert report.context_tokens == len(cached)
        if always_cut:
            assert report.reasoning_cut_method in ("splice", "truncate")
            assert report.reasoning_cut_tokens > 0 or report.reasoning_cut_note
        held_before = len(cached)
    stored = store.messages(session.conversation_id)
    if case in ("qwq", "deepseek-r1-distill"):
        assert all(m.reasoning for m in stored if m.role == "assistant")
        assert not any("</think>" in m.content for m in stored)


def test_a_model_without_reasoning_is_left_as_before(engine, store, tiny_model_dir):
    preset = get_preset("chat").with_changes(temperature=0.0, max_tokens=8)
    session = ConversationSession.start(engine, store, preset, model="tiny")
    report = session.send("Hello there").wait()
    assert report.reasoning_cut_method == "" and report.reasoning == ""
    assert report.reasoning_tokens == 0


KV_KINDS = {
    "8-bit": {"kv_bits": 8},
    "4-bit": {"kv_bits": 4, "kv_group": 32},
    "aged": {"kv_bits": 4, "kv_recent_tokens": 64, "kv_age_block": 64},
}


@pytest.mark.parametrize("kind", sorted(KV_KINDS))
def test_the_cut_holds_on_quantized_and_aged_caches(engines, store, kind):
    engine = engines("qwq.jinja", ())
    preset = get_preset("chat").with_changes(
        system_prompt="You are brief.",
        temperature=0.0,
        max_tokens=24,
        thinking_budget=8,
        quantized_kv_start=0,
        **KV_KINDS[kind],
    )
    session = ConversationSession.start(engine, store, preset, model=kind)
    held_before = 0
    for turn in range(3):
        report = session.send(f"Question {turn}: what is {turn} + {turn}?").wait()
        if turn:
            assert report.reused_tokens == held_before
        assert report.reasoning_cut_method == "splice", report.reasoning_cut_note
        cached = engine.cached_token_ids(session.cache_key)
        messages = session.model_messages(session.context(), NEXT_TURN_PLACEHOLDER)
        rendered = engine.render(messages, False, thinking=preset.thinking_settings())
        assert rendered[: len(cached)] == cached
        held_before = len(cached)


# Caches whose layers cannot drop entries from the middle: Gemma 3's sliding-window
# layers (a ring buffer) and LFM2's short convolutions (recurrent state). Built as the
# tiny random-weight model of that architecture, with the thinking model's tokenizer
# and QwQ's template (its prompt opens the reasoning, so every reply has a span to cut).
UNSPLICEABLE = {
    # kind: (architecture, the layers the turn report names)
    "sliding-window": ("gemma3_text", "sliding-window layers"),
    "hybrid": ("lfm2", "recurrent layers"),
}


@pytest.fixture(scope="module")
def unspliceable_engines(arch_model_dir, thinking_model_dir, tmp_path_factory):
    import json
    import shutil

    made: dict[str, Engine] = {}
    thinking = thinking_model_dir((TEMPLATES / "qwq.jinja").read_text(), ())

    def get(arch: str) -> Engine:
        if arch not in made:
            folder = tmp_path_factory.mktemp("thinking-arch") / arch
            shutil.copytree(arch_model_dir(arch), folder)
            for name in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(thinking / name, folder / name)
            config = json.loads((folder / "config.json").read_text())
            assert (
                config["vocab_size"]
                == json.loads((thinking / "config.json").read_text())["vocab_size"]
            )
            engine = Engine()
            engine.load(folder)
            assert engine.tokenizer.reasoning.has_reasoning
            made[arch] = engine
        return made[arch]

    yield get
    for engine in made.values():
        engine.shutdown()


@pytest.mark.parametrize("kind", sorted(UNSPLICEABLE))
def test_a_cache_that_cannot_splice_falls_back_to_re_prefill(
    unspliceable_engines, store, kind
):
    arch, layers = UNSPLICEABLE[kind]
    engine = unspliceable_engines(arch)
    # Seeded sampling, not greedy: greedy random weights of these shapes write only
    # newlines, whose reply renders differently, a fallback of another cause.
    preset = get_preset("chat").with_changes(
        system_prompt="You are brief.",
        temperature=1.0,
        max_tokens=24,
        thinking_budget=8,
    )
    session = ConversationSession.start(engine, store, preset, model=kind, seed=0)
    held_before = 0
    for turn in range(3):
        report = session.send(f"Question {turn}: what is {turn} + {turn}?").wait()
        if turn:
            # Only what the cache kept is reused; the rest is prefilled again.
            assert report.reused_tokens == held_before
        assert report.reasoning_tokens > 0
        # The turn report says the cut fell back, and why.
        assert report.reasoning_cut_method == "truncate", report.reasoning_cut_method
        assert report.reasoning_cut_tokens == 0
        assert layers in report.reasoning_cut_note, report.reasoning_cut_note
        cached = engine.cached_token_ids(session.cache_key)
        messages = session.model_messages(session.context(), NEXT_TURN_PLACEHOLDER)
        rendered = engine.render(messages, False, thinking=preset.thinking_settings())
        assert rendered[: len(cached)] == cached, kind
        assert report.context_tokens == len(cached)
        held_before = len(cached)
    # The replies' reasoning is still stored apart from their answers.
    stored = store.messages(session.conversation_id)
    assert all(m.reasoning for m in stored if m.role == "assistant")
