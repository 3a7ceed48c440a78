"""The doctor's thinking section: a preset's thinking choice, its budget and the room a
reply takes with it, and whether the model reasons at all.

Whether a model reasons is read from its ``tokenizer.json`` and chat template with the
same detection the engine uses (`app.core.reasoning.markers.detect`), through the
``tokenizers`` package: no MLX, no model loaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from app.core.reasoning.markers import NO_REASONING, ReasoningFormat, detect
from app.core.reasoning.thinking import reply_room


class _FileTokenizer:
    """A ``tokenizer.json`` with the two methods `detect` reads."""

    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids


def chat_template(folder: Path) -> str | None:
    """The model's chat template: ``chat_template.jinja``, else tokenizer_config's."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        return None
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
    return template if isinstance(template, str) else None


def model_reasoning(folder: Path) -> ReasoningFormat | None:
    """How the model in ``folder`` marks reasoning; None when it cannot be read."""
    if not (folder / "tokenizer.json").is_file():
        return None
    try:
        return detect(_FileTokenizer(folder), chat_template(folder))
    except Exception:  # a tokenizer file tokenizers cannot read: say "unknown"
        return None


def thinking_section(preset: Any, model_dir: Path | None) -> dict[str, Any]:
    """The preset's thinking settings and the reply room they give.

    Args:
        preset: The preset (`app.core.presets.presets.Preset`).
        model_dir: The model folder, or None (the room is then given as for a model
            that reasons).

    Returns:
        ``preset``, ``thinking`` (on/off), ``budget`` (0: none), ``effort``,
        ``keep_past``, ``max_tokens``, ``reply_tokens`` (what the budget check and the
        context meter reserve), ``model_reasons`` (True/False, None when unknown or
        no model) and ``switch`` (the template's thinking switch, "" without one).
    """
    settings = preset.thinking_settings()
    fmt = model_reasoning(model_dir) if model_dir is not None else None
    # Without a model (or an unreadable one) the room is given as for a model that
    # thinks with a switch: the most this preset may reserve.
    counted = fmt or ReasoningFormat(style="think", switch="enable_thinking")
    return {
        "preset": preset.name,
        "thinking": settings.enabled,
        "budget": settings.budget,
        "effort": settings.effort,
        "keep_past": settings.keep_past,
        "max_tokens": preset.max_tokens,
        "reply_tokens": reply_room(preset.max_tokens, settings, counted),
        "model_reasons": None if fmt is None else fmt.has_reasoning,
        "switch": (fmt or NO_REASONING).switch,
    }


def format_thinking(section: dict[str, Any], row) -> list[str]:
    """The section as terminal lines; ``row(label, value)`` formats one line."""
    reasons = section["model_reasons"]
    lines = [f"Thinking (preset {section['preset']})"]
    if reasons is not None:
        switch = f"; template switch {section['switch']}" if section["switch"] else ""
        lines.append(row("Model reasons", ("yes" + switch) if reasons else "no"))
    lines.append(row("Thinking", "on" if section["thinking"] else "off"))
    budget = section["budget"]
    lines.append(
        row(
            "Thinking budget",
            f"{budget:,} tokens" if budget else "none (max_tokens bounds reasoning)",
        )
    )
    room = section["reply_tokens"]
    if reasons is False:
        text = f"{room:,} tokens (max_tokens; the model does not reason)"
    elif room != section["max_tokens"]:
        text = (
            f"{room:,} tokens (max_tokens {section['max_tokens']:,} + thinking "
            f"budget {budget:,})"
        )
    else:
        text = f"{room:,} tokens (max_tokens)"
    lines.append(row("Reply room", text))
    return lines
