"""The preset editor's checks, in the words of its form.

`presets.preset_from_dict` is the authority on what a preset may hold, and its messages
name keys for files and the command line ("max_tokens must be between 1 and 65536").
A form needs the same rules said with its own labels ("Reply length must be a whole
number"), and it can refuse combinations that validate key by key yet can never work,
such as a reply as long as the whole context. `check_form` returns those problems per
field while the user types; the core's own check still runs last, so the form never
accepts what a preset file would refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import SettingsError
from app.core.presets.presets import (
    VALUE_RANGES,
    Preset,
    preset_from_dict,
    valid_preset_name,
)
from app.core.trim.policy import MIN_SUMMARY_TOKENS

LABELS = {
    "name": "Name",
    "description": "Description",
    "kv_bits": "KV precision (bits)",
    "kv_group": "KV group size",
    "quantized_kv_start": "Quantize KV after (tokens)",
    "max_context": "Context limit (tokens)",
    "keep_ratio": "Share kept when trimming",
    "auto_trim": "Trim automatically",
    "trim_method": "Trim method",
    "summary_mode": "Summaries written",
    "summary_max_tokens": "Summary length (tokens)",
    "segmenting": "Read long documents in segments",
    "segment_tokens": "Segment size (tokens)",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "max_tokens": "Reply length (tokens)",
    "system_prompt": "System prompt",
    "kv_recent_tokens": "KV aging: newest tokens kept exact (0: off)",
    "kv_band_tokens": "KV aging: tokens in the band after them",
    "kv_band_key_bits": "KV aging: band key bits",
    "kv_band_value_bits": "KV aging: band value bits",
    "kv_floor_value_bits": "KV aging: oldest tokens' value bits (0: as KV bits)",
    "kv_age_block": "KV aging: block moved down at once (tokens)",
    "kv_rotate_keys": "KV aging: rotate keys before quantizing",
    "recall": "Recall trimmed messages a new message needs",
}
# The same labels inside a sentence ("... smaller than the context limit").
_IN_SENTENCE = {
    "max_context": "the context limit",
    "max_tokens": "the reply length",
    "summary_max_tokens": "the summary length",
}


@dataclass(frozen=True)
class FormProblem:
    """Something in the form that cannot work.

    Attributes:
        field: The preset field the problem is about (where the form marks it).
        message: One sentence in the form's words.
        blocking: True when the preset cannot be used; False for a warning.
    """

    field: str
    message: str
    blocking: bool = True


def label(field: str) -> str:
    """The form's label of a preset field, without its unit."""
    return LABELS.get(field, field.replace("_", " ").capitalize()).split(" (")[0]


def check_form(
    values: dict[str, Any], trained_context: int | None = None
) -> tuple[Preset | None, list[FormProblem]]:
    """Check the form's values.

    Args:
        values: Field name → value; numbers still as text when they did not parse.
        trained_context: The loaded model's trained context, if known: settings past
            it are warned about.

    Returns:
        The preset (None when a problem blocks it) and the problems, blocking first.
    """
    problems = [p for p in (_field_problem(k, v) for k, v in values.items()) if p]
    if not problems:
        problems = _combination_problems(values, trained_context)
    blocking = [p for p in problems if p.blocking]
    if blocking:
        return None, blocking + [p for p in problems if not p.blocking]
    try:
        preset = preset_from_dict(str(values.get("name", "")), values)
    except SettingsError as exc:  # a rule the form does not know yet: the core's words
        return None, [FormProblem("name", str(exc))]
    return preset, problems


def _field_problem(field: str, value: Any) -> FormProblem | None:
    name = label(field)
    if field == "name" and not valid_preset_name(str(value)):
        return FormProblem(
            field, "Name: use 1 to 40 lowercase letters, digits, '-' or '_'."
        )
    if field not in VALUE_RANGES:
        return None
    low, high = VALUE_RANGES[field]
    whole = isinstance(low, int) and isinstance(high, int)
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "a whole number" if whole else "a number"
        return FormProblem(field, f"{name} must be {kind}.")
    if whole and not isinstance(value, int):
        return FormProblem(field, f"{name} must be a whole number.")
    if not low <= value <= high:
        return FormProblem(
            field, f"{name} must be between {_number(low)} and {_number(high)}."
        )
    return None


def _combination_problems(
    values: dict[str, Any], trained_context: int | None = None
) -> list[FormProblem]:
    context = values["max_context"]
    problems = []
    for field in ("max_tokens", "summary_max_tokens"):
        if values[field] >= context:
            problems.append(
                FormProblem(
                    field,
                    f"{label(field)} must be smaller than the context limit "
                    f"({_number(context)} tokens).",
                )
            )
    if not problems and values["max_tokens"] + MIN_SUMMARY_TOKENS >= context:
        problems.append(
            FormProblem(
                "max_tokens",
                f"{label('max_tokens')} leaves no room for a summary and your message: "
                f"keep it under {_number(context - MIN_SUMMARY_TOKENS)} tokens.",
            )
        )
    if values["max_tokens"] * 2 > context and not problems:
        problems.append(
            FormProblem(
                "max_tokens",
                f"A reply may take more than half of {_IN_SENTENCE['max_context']}: "
                "long conversations will be trimmed at almost every message.",
                blocking=False,
            )
        )
    kept = round(values["keep_ratio"] * context)
    after_trim = kept + values["summary_max_tokens"] + values["max_tokens"]
    if not problems and after_trim >= context:
        problems.append(
            FormProblem(
                "keep_ratio",
                f"{label('keep_ratio')} ({_number(kept)} tokens) plus "
                f"{_IN_SENTENCE['summary_max_tokens']} and a reply fill "
                f"{_IN_SENTENCE['max_context']} ({_number(context)} tokens): nearly "
                "every message will trim. Lower one of them or raise the limit.",
                blocking=False,
            )
        )
    if trained_context and values["segment_tokens"] > trained_context:
        problems.append(
            FormProblem(
                "segment_tokens",
                f"{label('segment_tokens')} ({_number(values['segment_tokens'])}) is "
                f"more than the loaded model was trained for ({_number(trained_context)} "
                "tokens): documents are cut in segments that fit it instead.",
                blocking=False,
            )
        )
    if values["quantized_kv_start"] >= context and values["kv_bits"] != 16:
        problems.append(
            FormProblem(
                "quantized_kv_start",
                f"{label('quantized_kv_start')} is past the context limit, so the KV "
                f"cache is never quantized to {values['kv_bits']} bits.",
                blocking=False,
            )
        )
    return problems


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"
