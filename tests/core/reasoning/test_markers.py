"""Reasoning markers and the thinking switch are read off the tokenizer and template."""

from __future__ import annotations

from pathlib import Path

from mlx_lm.tokenizer_utils import load as load_tokenizer

from app.core.reasoning.markers import (
    NO_REASONING,
    detect,
    prompt_opens_reasoning,
    template_switch,
)
from app.core.reasoning.thinking import ThinkingSettings, template_arguments

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"
HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>")


def test_a_think_tokenizer_gives_think_markers_and_its_templates_switch(
    thinking_model_dir,
):
    tokenizer = load_tokenizer(thinking_model_dir())
    fmt = detect(tokenizer)
    assert fmt.style == "think" and (fmt.start, fmt.end) == ("<think>", "</think>")
    assert len(fmt.start_ids) == 1 and len(fmt.end_ids) == 1
    assert fmt.switch == "enable_thinking"
    assert template_arguments(fmt, ThinkingSettings(enabled=False)) == {
        "enable_thinking": False
    }
    # The prompt's tail decides whether the reply starts inside reasoning.
    off = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        add_generation_prompt=True,
        enable_thinking=False,
    )
    on = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert not prompt_opens_reasoning(fmt, off) and not prompt_opens_reasoning(fmt, on)
    qwq = load_tokenizer(thinking_model_dir((TEMPLATES / "qwq.jinja").read_text()))
    opened = qwq.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True
    )
    assert prompt_opens_reasoning(detect(qwq), opened)
    assert detect(qwq).switch == ""


def test_a_model_without_markers_has_no_reasoning(tiny_model_dir):
    fmt = detect(load_tokenizer(tiny_model_dir))
    assert fmt == NO_REASONING and not fmt.has_reasoning
    assert template_arguments(fmt, ThinkingSettings(enabled=False)) == {}


def test_harmony_channels_are_found_and_effort_is_the_switch(thinking_model_dir):
    folder = thinking_model_dir((TEMPLATES / "gpt-oss.jinja").read_text(), HARMONY)
    fmt = detect(load_tokenizer(folder))
    assert fmt.style == "harmony" and fmt.switch == "reasoning_effort"
    assert len(fmt.start_ids) > 1 and fmt.answer_ids
    assert template_arguments(fmt, ThinkingSettings(effort="high")) == {
        "reasoning_effort": "high"
    }
    assert template_arguments(fmt, ThinkingSettings(enabled=False)) == {
        "reasoning_effort": "low"
    }


def test_gemma4_thought_channel_and_its_switch(thinking_model_dir):
    from tests.core.chat.test_reasoning_cache import GEMMA4

    template = (TEMPLATES / "gemma4.jinja").read_text()
    tokenizer = load_tokenizer(thinking_model_dir(template, GEMMA4, think_tokens=False))
    fmt = detect(tokenizer)
    assert fmt.has_reasoning and fmt.start == "<|channel>thought"
    assert fmt.end == "<channel|>" and len(fmt.start_ids) > 1
    assert fmt.switch == "enable_thinking"
    off = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}],
        add_generation_prompt=True,
        enable_thinking=False,
    )
    # Off: the prompt ends with an empty thought channel (opened and closed).
    assert not prompt_opens_reasoning(fmt, off)
    assert tokenizer.decode(off).endswith("<|channel>thought\n<channel|>")


def test_switches_are_read_from_template_text():
    assert template_switch((TEMPLATES / "qwen3.jinja").read_text(), "think") == (
        "enable_thinking"
    )
    assert (
        template_switch((TEMPLATES / "deepseek-r1-distill.jinja").read_text(), "think")
        == ""
    )
    assert template_switch("{% if thinking %}<think>{% endif %}", "think") == "thinking"
    assert template_switch(None, "think") == ""


def test_the_reference_format_renders_exactly_as_transformers_does(thinking_model_dir):
    from app.core.modelkit.reference import chat_format

    tokenizer = load_tokenizer(thinking_model_dir())
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                },
            },
        }
    ]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Porto?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "Call the tool.",
            "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Porto"}}}
            ],
        },
        {"role": "tool", "content": "Sunny."},
        {"role": "assistant", "content": "Sunny.", "reasoning_content": "Done."},
        {"role": "user", "content": "Thanks"},
    ]
    for thinking in (True, False):
        for prompt in (True, False):
            expected = tokenizer.apply_chat_template(
                messages,
                tools=tools,
                add_generation_prompt=prompt,
                enable_thinking=thinking,
                tokenize=False,
            )
            assert expected == chat_format.render(
                messages, tools, add_generation_prompt=prompt, enable_thinking=thinking
            )
    assert tokenizer.has_tool_calling and tokenizer.tool_call_start == "<tool_call>"


def test_gpt_oss_keeps_the_analysis_before_a_tool_call_from_reasoning_content(
    thinking_model_dir,
):
    """gpt-oss's template reads a reply's analysis from ``thinking`` and keeps it
    before a tool call; Swapless gives ``reasoning_content``, also passed as
    ``thinking`` where the template reads that name."""
    from app.core.engine.prompt_tokenizer import PromptTokenizer

    folder = thinking_model_dir((TEMPLATES / "gpt-oss.jinja").read_text(), HARMONY)
    tokenizer = PromptTokenizer(load_tokenizer(folder))
    call = {
        "type": "function",
        "id": "c1",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should look it up.",
            "tool_calls": [call],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "Rain, 4 degrees."},
    ]
    text = tokenizer.decode(tokenizer.render(messages))
    assert "I should look it up." in text
    # A template that reads reasoning_content is given the messages unchanged.
    plain = PromptTokenizer(load_tokenizer(thinking_model_dir()))
    assert "thinking" not in plain._with_template_fields(messages)[1]
