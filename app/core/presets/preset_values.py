"""The `Preset` type and its rules: every value checked on load, a bad one refused.

A preset is a typed, frozen bundle of every per-conversation setting (context limit,
trim, summary, sampling, KV precision and aging, reasoning). `preset_from_dict` checks
each value against its type, allowed choices and range, and the aging keys together;
the message of a refusal names the key and the allowed values, so nothing downstream
re-validates. Where presets are stored and looked up is `app.core.presets.presets`.

The KV aging keys (``kv_recent_tokens`` …), ``recall`` and the reasoning keys came
after version 0.1: settings without them get their defaults (`OPTIONAL_DEFAULTS`),
never a refusal.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from app.core.errors import SettingsError
from app.core.known_keys import reject_unknown_keys
from app.core.presets.generation_settings import (
    DEFAULT_AGE_BLOCK,
    TIER_BITS,
    VALID_AGE_BLOCKS,
    VALID_KV_BITS,
    VALID_KV_GROUPS,
    KVAging,
    KVSettings,
    SamplingSettings,
)
from app.core.reasoning.thinking import EFFORTS, ThinkingSettings

DEFAULT_PRESET = "chat"
VALID_TRIM_METHODS = ("splice", "rebuild")
VALID_SUMMARY_MODES = ("model", "extractive")
KEEP_RATIO_RANGE = (0.1, 0.9)
MIN_CONTEXT = 256
MAX_CONTEXT = 1_048_576
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


@dataclass(frozen=True)
class Preset:
    """Every setting a conversation runs with.

    Attributes:
        name: The preset's name.
        description: One line shown in the preset picker.
        kv_bits: KV cache precision (16, 8 or 4).
        kv_group: KV quantization group size (32, 64 or 128).
        quantized_kv_start: Tokens held before KV quantization starts.
        max_context: Tokens the conversation may hold before it is trimmed.
        keep_ratio: Share of ``max_context`` kept (newest turns) when trimming.
        auto_trim: Trim automatically; when off an over-long request is refused.
        trim_method: ``splice`` (keep cached KV, compute only the summary) or
            ``rebuild`` (re-prefill the trimmed context; exact).
        summary_mode: ``model`` (the loaded model writes it) or ``extractive``.
        summary_max_tokens: Upper bound on a summary's length.
        segmenting: Process long documents in segments.
        segment_tokens: Tokens per document segment.
        temperature: Sampling temperature (0 is greedy).
        top_p: Nucleus sampling threshold.
        max_tokens: Upper bound on a reply's length.
        system_prompt: The system prompt.
        kv_recent_tokens: KV aging: the newest tokens kept unquantized; 0 turns aging
            off (every token at ``kv_bits``). With aging, ``kv_bits`` is the key
            precision of the oldest tokens.
        kv_band_tokens: KV aging: tokens after the recent ones held at the band's
            precision (0: none).
        kv_band_key_bits: KV aging: bits of the band's keys.
        kv_band_value_bits: KV aging: bits of the band's values.
        kv_floor_value_bits: KV aging: bits of the oldest tokens' values (0: the same
            as ``kv_bits``).
        kv_age_block: KV aging: tokens moved down a tier at once.
        kv_rotate_keys: KV aging: Hadamard-rotate keys before quantizing them.
        recall: Before each turn, put back the trimmed messages the new message needs
            (word for word, within a share of the limit the trim reserves).
        thinking: A reasoning model thinks before answering (its template's switch;
            ignored by models that do not reason).
        thinking_budget: Most reasoning tokens per reply, then Swapless ends the
            thought itself and the model answers; 0: only ``max_tokens`` bounds it.
        reasoning_effort: ``low``, ``medium`` or ``high`` for templates with an
            effort switch (gpt-oss).
        keep_past_reasoning: Keep earlier turns' reasoning where the template
            offers the choice (``preserve_thinking``); off: old thoughts leave the KV.
    """

    name: str
    description: str
    kv_bits: int
    kv_group: int
    quantized_kv_start: int
    max_context: int
    keep_ratio: float
    auto_trim: bool
    trim_method: str
    summary_mode: str
    summary_max_tokens: int
    segmenting: bool
    segment_tokens: int
    temperature: float
    top_p: float
    max_tokens: int
    system_prompt: str
    kv_recent_tokens: int = 0
    kv_band_tokens: int = 0
    kv_band_key_bits: int = 8
    kv_band_value_bits: int = 8
    kv_floor_value_bits: int = 0
    kv_age_block: int = DEFAULT_AGE_BLOCK
    kv_rotate_keys: bool = False
    recall: bool = True
    thinking: bool = True
    thinking_budget: int = 0
    reasoning_effort: str = "medium"
    keep_past_reasoning: bool = False

    @property
    def kv_aging(self) -> KVAging | None:
        """The KV precision tiers by age, or None when aging is off.

        Raises:
            ValueError: The aging keys do not fit together (`preset_from_dict` has
                already refused such a preset).
        """
        if not self.kv_recent_tokens:
            return None
        return KVAging(
            recent_tokens=self.kv_recent_tokens,
            band_tokens=self.kv_band_tokens,
            band_key_bits=self.kv_band_key_bits,
            band_value_bits=self.kv_band_value_bits,
            floor_key_bits=self.kv_bits,
            floor_value_bits=self.kv_floor_value_bits or self.kv_bits,
            block_tokens=self.kv_age_block,
            rotate_keys=self.kv_rotate_keys,
        )

    def kv_settings(self) -> KVSettings:
        """Return the KV cache precision of this preset."""
        aging = self.kv_aging
        if aging is not None:
            return KVSettings.aged(aging, self.kv_group)
        return KVSettings(
            bits=self.kv_bits,
            group_size=self.kv_group,
            quantized_kv_start=self.quantized_kv_start,
        )

    def sampling_settings(self, seed: int | None = None) -> SamplingSettings:
        """Return the sampling settings of this preset."""
        return SamplingSettings(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=seed,
        )

    def thinking_settings(self) -> ThinkingSettings:
        """Return what a reasoning model is asked to do in this preset."""
        return ThinkingSettings(
            enabled=self.thinking,
            budget=self.thinking_budget,
            effort=self.reasoning_effort,
            keep_past=self.keep_past_reasoning,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return every field as plain values (what a conversation stores)."""
        return asdict(self)

    def with_changes(self, **changes: Any) -> Preset:
        """Return a validated copy with some settings changed."""
        data = self.to_dict()
        data.update({k: v for k, v in changes.items() if v is not None})
        return preset_from_dict(data["name"], data)


PRESET_FIELDS = {f.name: f for f in fields(Preset)}
# Reasoning keys, added after 0.1 like the kv_ ones.
THINKING_KEYS = (
    "thinking",
    "thinking_budget",
    "reasoning_effort",
    "keep_past_reasoning",
)
# Keys added after 0.1: a file or stored conversation without them gets these.
OPTIONAL_DEFAULTS = {
    f.name: f.default
    for f in fields(Preset)
    if (f.name.startswith("kv_") or f.name == "recall" or f.name in THINKING_KEYS)
    and f.default is not MISSING
}
_CHOICES: dict[str, tuple] = {
    "kv_bits": VALID_KV_BITS,
    "kv_group": VALID_KV_GROUPS,
    "trim_method": VALID_TRIM_METHODS,
    "summary_mode": VALID_SUMMARY_MODES,
    "kv_band_key_bits": TIER_BITS,
    "kv_band_value_bits": TIER_BITS,
    "kv_floor_value_bits": (0, *TIER_BITS),
    "kv_age_block": VALID_AGE_BLOCKS,
    "reasoning_effort": EFFORTS,
}
_RANGES: dict[str, tuple[float, float]] = {
    "keep_ratio": KEEP_RATIO_RANGE,
    "max_context": (MIN_CONTEXT, MAX_CONTEXT),
    "quantized_kv_start": (0, MAX_CONTEXT),
    "summary_max_tokens": (16, 4096),
    "segment_tokens": (256, 131_072),
    "temperature": (0.0, 5.0),
    "top_p": (0.01, 1.0),
    "max_tokens": (1, 65_536),
    "kv_recent_tokens": (0, MAX_CONTEXT),
    "kv_band_tokens": (0, MAX_CONTEXT),
    "thinking_budget": (0, 65_536),
}
# The rules, for a form that explains them in its own words (`preset_form`).
VALUE_RANGES = _RANGES


def valid_preset_name(name: str) -> bool:
    """True for 1-40 lowercase letters, digits, '-' or '_' (starting with no '-')."""
    return bool(_NAME.match(name))


def check_value(preset: str, key: str, value: Any) -> Any:
    expected = PRESET_FIELDS[key].type
    where = f"preset {preset!r}: {key}"
    if expected == "bool":
        if not isinstance(value, bool):
            raise SettingsError(f"{where} must be true or false, got {value!r}")
        return value
    if expected == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingsError(f"{where} must be a whole number, got {value!r}")
    elif expected == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(f"{where} must be a number, got {value!r}")
        value = float(value)
    elif expected == "str" and not isinstance(value, str):
        raise SettingsError(f"{where} must be text, got {value!r}")
    if key in _CHOICES and value not in _CHOICES[key]:
        allowed = ", ".join(str(v) for v in _CHOICES[key])
        raise SettingsError(f"{where} must be one of {allowed}, got {value!r}")
    if key in _RANGES:
        low, high = _RANGES[key]
        if not low <= value <= high:
            raise SettingsError(
                f"{where} must be between {low} and {high}, got {value!r}"
            )
    return value


def preset_from_dict(name: str, data: dict[str, Any]) -> Preset:
    """Validate ``data`` and return it as a `Preset`.

    Args:
        name: The preset's name.
        data: Its settings; ``name`` inside it is ignored.

    Raises:
        SettingsError: For an unknown key, a missing key or an invalid value; the
            message names the key and the allowed values.
    """
    if not valid_preset_name(name):
        raise SettingsError(
            f"preset name {name!r} must be 1-40 lowercase letters, digits, '-' or '_'"
        )
    values = {k: v for k, v in data.items() if k != "name"}
    reject_unknown_keys(
        values, (k for k in PRESET_FIELDS if k != "name"), f"preset {name!r}"
    )
    missing = [
        k
        for k in PRESET_FIELDS
        if k not in values and k != "name" and k not in OPTIONAL_DEFAULTS
    ]
    if missing:
        raise SettingsError(f"preset {name!r}: missing key {missing[0]!r}")
    checked = {key: check_value(name, key, value) for key, value in values.items()}
    preset = Preset(name=name, **checked)
    _check_aging(preset)
    return preset


def _check_aging(preset: Preset) -> None:
    """Refuse aging keys that validate one by one but not together."""
    if not preset.kv_recent_tokens:
        return
    where = f"preset {preset.name!r}"
    if preset.kv_bits == 16:
        raise SettingsError(
            f"{where}: kv_recent_tokens turns KV aging on, which needs kv_bits 8 or 4 "
            "for the oldest tokens' keys, got 16"
        )
    for key in ("kv_recent_tokens", "kv_band_tokens"):
        if getattr(preset, key) % preset.kv_age_block:
            raise SettingsError(
                f"{where}: {key} must be a multiple of kv_age_block "
                f"({preset.kv_age_block}), got {getattr(preset, key)!r}"
            )
    floor_values = preset.kv_floor_value_bits or preset.kv_bits
    if preset.kv_band_tokens and (
        preset.kv_bits > preset.kv_band_key_bits
        or floor_values > preset.kv_band_value_bits
    ):
        raise SettingsError(
            f"{where}: the oldest tokens (kv_bits {preset.kv_bits}, kv_floor_value_bits "
            f"{floor_values}) cannot be more precise than the band (kv_band_key_bits "
            f"{preset.kv_band_key_bits}, kv_band_value_bits "
            f"{preset.kv_band_value_bits})"
        )
    try:
        preset.kv_settings()
    except ValueError as exc:
        raise SettingsError(f"preset {preset.name!r}: {exc}") from exc
