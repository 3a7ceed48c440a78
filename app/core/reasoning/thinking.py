"""Thinking settings (per preset and per conversation) and what they ask of a template.

``enabled`` goes to the template's switch (`markers.ReasoningFormat.switch`): Qwen3's
``enable_thinking``, DeepSeek's ``thinking``, gpt-oss's ``reasoning_effort`` (where
"off" is the lowest effort: harmony models always reason a little). ``budget`` is a
number of reasoning tokens after which the engine writes the end marker itself and lets
the model answer, so a runaway thought cannot take the reply's room or the memory
budget: the budget is room of its own, on top of the answer's ``max_tokens``
(`reply_room`), and the budget check, the context meter and ``doctor`` count both. A
model without reasoning markers ignores all of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.reasoning.markers import ReasoningFormat

EFFORTS = ("low", "medium", "high")
# Upper bound of a budget (a reply's max_tokens bounds it in practice).
MAX_BUDGET = 1_000_000


@dataclass(frozen=True)
class ThinkingSettings:
    """Whether and how much a reasoning model thinks.

    Attributes:
        enabled: Ask the template for thinking (off: the answer comes directly).
        budget: Most reasoning tokens per reply; 0 means no budget of its own (the
            reply's ``max_tokens`` still bounds it).
        effort: ``low``, ``medium`` or ``high`` for templates with an effort switch.
        keep_past: Keep earlier turns' reasoning where the template offers the
            choice (``preserve_thinking``); off by default, so old thoughts leave the
            KV cache.
    """

    enabled: bool = True
    budget: int = 0
    effort: str = "medium"
    keep_past: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.budget, int) or not 0 <= self.budget <= MAX_BUDGET:
            raise ValueError(
                f"thinking budget must be a whole number from 0 to {MAX_BUDGET}, "
                f"got {self.budget!r}"
            )
        if self.effort not in EFFORTS:
            raise ValueError(
                f"reasoning effort must be one of {', '.join(EFFORTS)}, "
                f"got {self.effort!r}"
            )


DEFAULT_THINKING = ThinkingSettings()


def template_arguments(
    fmt: ReasoningFormat, settings: ThinkingSettings, template: str | None = None
) -> dict[str, Any]:
    """The keyword arguments to give the chat template for these settings.

    Args:
        fmt: The model's reasoning format (its ``switch``).
        settings: The settings.
        template: The template text, to see whether it has ``preserve_thinking``.

    Returns:
        Nothing for a model without reasoning or a switch.
    """
    arguments: dict[str, Any] = {}
    if not fmt.has_reasoning:
        return arguments
    if fmt.switch == "enable_thinking":
        arguments["enable_thinking"] = settings.enabled
    elif fmt.switch == "thinking":
        arguments["thinking"] = settings.enabled
    elif fmt.switch == "reasoning_effort":
        arguments["reasoning_effort"] = settings.effort if settings.enabled else "low"
    if template and "preserve_thinking" in template:
        arguments["preserve_thinking"] = settings.keep_past
    return arguments


def reply_room(
    max_tokens: int, settings: ThinkingSettings | None, fmt: ReasoningFormat
) -> int:
    """Tokens a reply may generate: the answer's ``max_tokens`` plus the thinking budget.

    The budget counts when the model reasons and thinks in this turn (thinking on, or a
    template that cannot turn it off: gpt-oss's lowest effort still reasons). A thought
    that runs to its budget then leaves the answer its whole ``max_tokens`` (less the
    few tokens of the end marker Swapless writes). Without a budget (0) reasoning and
    answer share ``max_tokens``, as before.

    Args:
        max_tokens: The preset's reply length.
        settings: The turn's thinking settings (None: the template's default, no
            budget).
        fmt: The model's reasoning format.
    """
    if settings is None or not fmt.has_reasoning or not settings.budget:
        return max_tokens
    if not settings.enabled and fmt.switch in ("enable_thinking", "thinking"):
        return max_tokens
    return max_tokens + settings.budget
