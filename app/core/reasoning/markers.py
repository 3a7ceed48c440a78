"""Find how a model marks its reasoning, from its tokenizer and chat template.

Names of models are never consulted. mlx-lm's ``TokenizerWrapper`` already infers the
``<think>``-style markers (``has_thinking``, ``think_start_tokens``, ...) from the
vocabulary; what it lacks is gpt-oss's *harmony* format, where a reply is a sequence of
channels: ``<|channel|>analysis<|message|>`` … ``<|end|>`` is the reasoning, and
``<|start|>assistant<|channel|>final<|message|>`` opens the answer. The template's
switch is read from the template text: ``enable_thinking`` (Qwen3, Granite, ...),
``thinking`` (DeepSeek V3.1 style) or ``reasoning_effort`` (gpt-oss).

A tokenizer with none of these gives `NO_REASONING`, and every caller then behaves as
before reasoning support existed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Style = Literal["none", "think", "harmony"]
Switch = Literal["", "enable_thinking", "thinking", "reasoning_effort"]

HARMONY_TOKENS = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>")
HARMONY_ANALYSIS = "<|channel|>analysis<|message|>"
HARMONY_END = "<|end|>"
HARMONY_FINAL = "<|start|>assistant<|channel|>final<|message|>"
HARMONY_FINAL_SHORT = "<|channel|>final<|message|>"


@dataclass(frozen=True)
class ReasoningFormat:
    """How one model's replies mark their reasoning.

    Attributes:
        style: ``none``, ``think`` (a start and an end marker around the reasoning) or
            ``harmony`` (gpt-oss channels).
        start: Marker text opening the reasoning (``<think>``).
        end: Marker text closing it (``</think>``).
        start_ids: Its token ids (one for most models; several for channel markers).
        end_ids: The end marker's token ids.
        answer_ids: Token sequences that open the answer and are not shown (harmony's
            final-channel header); empty for ``think``.
        forced_end: Text Swapless writes itself to end reasoning at the budget (the end
            marker and what the template puts between it and the answer).
        switch: The template's thinking argument, or empty when it has none.
    """

    style: Style = "none"
    start: str = ""
    end: str = ""
    start_ids: tuple[int, ...] = ()
    end_ids: tuple[int, ...] = ()
    answer_ids: tuple[tuple[int, ...], ...] = ()
    forced_end: str = ""
    switch: Switch = ""

    @property
    def has_reasoning(self) -> bool:
        """True when the model writes reasoning that Swapless can separate."""
        return self.style != "none"


NO_REASONING = ReasoningFormat()


def template_switch(template: str | None, style: Style) -> Switch:
    """The thinking argument a chat template reads, or empty.

    Args:
        template: The chat template's Jinja text (None: none).
        style: The marker style found in the vocabulary.
    """
    if not template:
        return ""
    if "enable_thinking" in template:
        return "enable_thinking"
    if style == "harmony" and "reasoning_effort" in template:
        return "reasoning_effort"
    if re.search(r"\bthinking\b\s*(is\s+defined|is\s+(true|false)|%\}|\))", template):
        return "thinking"
    if "reasoning_effort" in template:
        return "reasoning_effort"
    return ""


def _encode(tokenizer: Any, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def detect(tokenizer: Any, template: str | None = None) -> ReasoningFormat:
    """Read a model's reasoning format off its tokenizer.

    Args:
        tokenizer: mlx-lm's ``TokenizerWrapper`` (or any tokenizer with ``encode`` and
            ``get_vocab``; the wrapper's own inference is used when present).
        template: The chat template text (default: the tokenizer's).

    Returns:
        The format; `NO_REASONING` when the model has no reasoning markers.
    """
    if template is None:
        template = getattr(tokenizer, "chat_template", None)
        if not isinstance(template, str):
            template = None
    vocab = tokenizer.get_vocab()
    if all(token in vocab for token in HARMONY_TOKENS):
        return ReasoningFormat(
            style="harmony",
            start=HARMONY_ANALYSIS,
            end=HARMONY_END,
            start_ids=_encode(tokenizer, HARMONY_ANALYSIS),
            end_ids=_encode(tokenizer, HARMONY_END),
            answer_ids=(
                _encode(tokenizer, HARMONY_FINAL),
                _encode(tokenizer, HARMONY_FINAL_SHORT),
            ),
            forced_end=HARMONY_END + HARMONY_FINAL,
            switch=template_switch(template, "harmony"),
        )
    if getattr(tokenizer, "has_thinking", False):
        start, end = tokenizer.think_start, tokenizer.think_end
        start_ids = tuple(tokenizer.think_start_tokens)
        end_ids = tuple(tokenizer.think_end_tokens)
    elif "<think>" in vocab and "</think>" in vocab:
        start, end = "<think>", "</think>"
        start_ids, end_ids = (vocab[start],), (vocab[end],)
    else:
        return NO_REASONING
    return ReasoningFormat(
        style="think",
        start=start,
        end=end,
        start_ids=start_ids,
        end_ids=end_ids,
        forced_end=f"\n{end}\n\n",
        switch=template_switch(template, "think"),
    )


def _rfind(ids: Sequence[int], marker: tuple[int, ...]) -> int:
    if not marker:
        return -1
    n = len(marker)
    for index in range(len(ids) - n, -1, -1):
        if tuple(ids[index : index + n]) == marker:
            return index
    return -1


def prompt_opens_reasoning(fmt: ReasoningFormat, prompt_ids: Sequence[int]) -> bool:
    """True when the prompt ends inside an open reasoning block.

    Templates such as DeepSeek-R1-Distill's (and Qwen3-2507 Thinking's) write
    ``<think>\\n`` into the generation prompt, so the model starts mid-reasoning and
    writes only the end marker. Only the prompt's tail is looked at (the generation
    prompt), never a user's text earlier in the conversation.
    """
    if not fmt.has_reasoning:
        return False
    tail = list(prompt_ids[-16:])
    start = _rfind(tail, fmt.start_ids)
    return start >= 0 and start > _rfind(tail, fmt.end_ids)
