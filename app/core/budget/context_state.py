"""What a conversation holds against its limits: the numbers behind the context meter.

The meter, the CLI and the server all ask the same questions — how many tokens does the
conversation hold, what limit is in force, how many KV bytes is that at the preset's
precision (bits *and* group, or an aged cache's tiers: tokens and bytes per tier), at
what size will the next turn trim — so the answers are computed here once, from the
budget, and never in a view or a worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.budget.device_budget import DeviceBudget
from app.core.trim.policy import DEFAULT_WARNING_TRIM_RATIO, trim_threshold

DeviceLimit = Callable[..., "int | None"]
"""``device_limit(bits, group)`` or, for an aged cache, ``(bits, group, aging)``."""


@dataclass(frozen=True)
class ContextTier:
    """One precision tier of an aged KV cache, for the meter's bands.

    Attributes:
        name: ``recent`` (newest, unquantized), ``band`` or ``floor`` (oldest).
        key_bits: Bits of its keys (16: unquantized).
        value_bits: Bits of its values.
        tokens: Tokens in the tier.
        nbytes: Bytes of the tier (all full-attention layers).
    """

    name: str
    key_bits: int
    value_bits: int
    tokens: int
    nbytes: int

    @property
    def precision(self) -> str:
        """``exact``, ``8-bit`` or ``K8/V4``."""
        if self.key_bits == 16:
            return "exact"
        if self.key_bits == self.value_bits:
            return f"{self.key_bits}-bit"
        return f"K{self.key_bits}/V{self.value_bits}"


def tiers_from_layer_groups(groups) -> tuple[ContextTier, ...]:
    """The tiers of a live cache from its `LayerGroup`s (those with a ``tier``)."""
    found: dict[str, list] = {}
    for group in groups:
        name = getattr(group, "tier", "")
        if name:
            found.setdefault(name, []).append(group)
    return tuple(
        ContextTier(
            name=name,
            key_bits=members[0].bits,
            value_bits=members[0].value_bits or members[0].bits,
            tokens=max(member.tokens or 0 for member in members),
            nbytes=sum(member.nbytes for member in members),
        )
        for name, members in found.items()
    )


@dataclass(frozen=True)
class ContextState:
    """What the context meter shows for one conversation.

    Attributes:
        conversation_id: The conversation, or None for a chat not started yet.
        tokens: Tokens the conversation holds in the KV cache (or would, once sent).
        effective_limit: The limit in force: the preset's, or the device's if smaller.
        preset_limit: The preset's own max_context.
        kv_bytes: Bytes of KV cache for those tokens at the preset's precision.
        kv_bits: That precision.
        kv_group: Its quantization group (ignored at 16 bits).
        trims: Summaries written for this conversation so far.
        next_trim_at: Tokens held at which the next turn will trim first (it leaves
            room for a whole reply: ``reply_tokens``).
        exact: True when measured on the live cache, False when estimated from the
            rendered prompt.
        kv_group: Its quantization group (ignored at 16 bits).
        kv_tiers: For an aged cache, tokens and bytes per tier, newest first (empty
            for a uniform cache).
        kv_aging: For an aged cache, its tiers in words; empty otherwise.
        reply_tokens: The room a reply is given: max_tokens, plus the thinking
            budget of a reasoning model that thinks with one.
    """

    conversation_id: int | None
    tokens: int
    effective_limit: int
    preset_limit: int
    kv_bytes: int
    kv_bits: int
    trims: int
    next_trim_at: int
    exact: bool
    kv_group: int = 64
    kv_tiers: tuple[ContextTier, ...] = ()
    kv_aging: str = ""
    reply_tokens: int = 0


def effective_limit(
    preset_limit: int,
    bits: int,
    group: int,
    device_limit: DeviceLimit | None,
    aging=None,
) -> int:
    """The smaller of a preset's max_context and the device's max safe context.

    Args:
        preset_limit: The preset's max_context.
        bits: KV bits of the preset.
        group: KV group of the preset.
        device_limit: ``device_limit(bits, group)``: the device's max safe context, or
            None when unknown (no model, or memory does not limit it); called with
            ``aging`` as a third argument for an aged cache.
        aging: The preset's `KVAging`, or None.
    """
    if device_limit is None:
        device = None
    elif aging is not None:
        device = device_limit(bits, group, aging)
    else:
        device = device_limit(bits, group)
    return min(preset_limit, device) if device is not None else preset_limit


def next_trim_at(limit: int, max_tokens: int, pressure: str) -> int:
    """Tokens held at which the next turn trims first (room for a whole reply)."""
    threshold = trim_threshold(limit, pressure, DEFAULT_WARNING_TRIM_RATIO)
    return max(0, threshold - max_tokens)


def estimate_kv_bytes(
    budget: DeviceBudget | None, tokens: int, bits: int, group: int, aging=None
) -> int:
    """KV bytes ``tokens`` tokens take at a precision (0 when it cannot be known).

    Args:
        budget: The loaded model's budget (None: no model or unknown geometry).
        tokens: Tokens held.
        bits: KV bits.
        group: KV group.
        aging: An aged cache's tiers, or None.
    """
    if budget is None or not tokens:
        return 0
    try:
        if aging is not None:
            return budget.kv_bytes(tokens, bits, group, aging)
        return budget.kv_bytes(tokens, bits, group)
    except ValueError:
        return 0  # a precision this model cannot use


def estimate_tiers(
    budget: DeviceBudget | None, tokens: int, aging, group: int
) -> tuple[ContextTier, ...]:
    """An aged cache's tiers at ``tokens`` tokens, from the budget (empty if unknown)."""
    if budget is None or aging is None or not tokens:
        return ()
    try:
        tiers = budget.tiers(tokens, aging, group)
    except ValueError:
        return ()
    return tuple(
        ContextTier(t.name, t.key_bits, t.value_bits, t.tokens, t.nbytes) for t in tiers
    )


def context_state(
    *,
    conversation_id: int | None,
    preset,
    limit: int,
    cached_tokens: int,
    cached_kv_bytes: int,
    prompt_tokens: Callable[[], int],
    trims: int,
    pressure: str,
    budget: DeviceBudget | None,
    cached_layers: tuple = (),
    reply_tokens: int | None = None,
) -> ContextState:
    """The meter's numbers for a conversation (or a new chat, ``conversation_id`` None).

    Args:
        conversation_id: The conversation.
        preset: Its preset (`app.core.presets.presets.Preset`).
        limit: The effective limit (see `effective_limit`).
        cached_tokens: Tokens its live cache holds (0 when it has none).
        cached_kv_bytes: Bytes that cache holds.
        prompt_tokens: Counts the tokens of what the model would see now; called only
            when there is no live cache.
        trims: Summaries written so far.
        pressure: System memory pressure level (``normal``/``warning``/``critical``).
        budget: The loaded model's budget, for the estimate without a live cache.
        cached_layers: The live cache's `LayerGroup`s (an aged cache's tiers).
        reply_tokens: The room a reply is given (`app.core.reasoning.thinking.
            reply_room`: max_tokens plus a thinking budget); default max_tokens.
    """
    aging = getattr(preset, "kv_aging", None)
    room = preset.max_tokens if reply_tokens is None else reply_tokens
    if cached_tokens:
        tokens, kv_bytes, exact = cached_tokens, cached_kv_bytes, True
        tiers = tiers_from_layer_groups(cached_layers)
    else:
        tokens = prompt_tokens()
        kv_bytes = estimate_kv_bytes(
            budget, tokens, preset.kv_bits, preset.kv_group, aging
        )
        tiers = estimate_tiers(budget, tokens, aging, preset.kv_group)
        exact = False
    return ContextState(
        conversation_id=conversation_id,
        tokens=tokens,
        effective_limit=limit,
        preset_limit=preset.max_context,
        kv_bytes=kv_bytes,
        kv_bits=preset.kv_bits,
        kv_group=preset.kv_group,
        trims=trims,
        next_trim_at=next_trim_at(limit, room, pressure),
        exact=exact,
        kv_tiers=tiers,
        kv_aging=aging.label() if aging is not None else "",
        reply_tokens=room,
    )
