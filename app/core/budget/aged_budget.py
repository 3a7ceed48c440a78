"""Bytes of an aged KV cache (precision tiers by age), exactly as the engine allocates them.

An aged cache (`app.core.presets.generation_settings.KVAging`) keeps the newest tokens of every
full-attention layer at the activation dtype, an optional band of older ones at a middle
precision and the rest at a floor. Its bytes are not a per-token constant, so the budget
counts them tier by tier, from the same rules the cache follows
(`app.core.engine.cache.aged_cache`):

* tokens arrive in the first tier (the recent one, or the band or the floor when the
  tiers before it are empty); once a tier holds a whole block more than its size, its
  oldest blocks move to the next tier, so a bounded tier holds from its size to its size
  plus one block;
* every tier's buffer grows in steps of one block, and a bounded tier that ever passed
  tokens on keeps room for its size plus one block;
* a quantized tier stores per element ``bits / 8`` bytes plus a scale and a bias per
  group in the activation dtype, keys and values each at their own bits.

The figures are exact for a cache that grew forward (prefill chunks, decoded tokens).
A block that moved down never comes back up, so a cache rewound by a few tokens right
after a move holds one block more at the lower tier (and fewer recent tokens in the same
room) than a cache grown to that length: at most one block of floor tokens over the
figure, which the budget's safety factor absorbs as it absorbs the uniform cache's
extra allocation step. Sliding-window and recurrent layers are counted as for a uniform
cache.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from app.core.budget.kv_budget import (
    ALLOCATION_STEP,
    fixed_kv_bytes,
    kv_bytes_at,
    resolve_act_bytes,
    validate_kv_quantization,
)
from app.core.budget.layers import LayerCache, LayerKind
from app.core.budget.memory_budget import BudgetSettings, memory_budget_bytes
from app.core.budget.model_geometry import ModelGeometry
from app.core.presets.generation_settings import KVAging

RECENT = "recent"
BAND = "band"
FLOOR = "floor"
UNQUANTIZED = 16


@dataclass(frozen=True)
class Tier:
    """One precision tier of an aged cache.

    Attributes:
        name: ``recent``, ``band`` or ``floor``.
        size: Tokens it keeps before passing blocks on (None for the floor).
        key_bits: Bits of its keys (16: the activation dtype).
        value_bits: Bits of its values.
    """

    name: str
    size: int | None
    key_bits: int
    value_bits: int

    @property
    def quantized(self) -> bool:
        """True for the band and the floor."""
        return self.key_bits != UNQUANTIZED


@dataclass(frozen=True)
class TierBytes:
    """What one tier holds at a context length (all full-attention layers together).

    Attributes:
        name: ``recent``, ``band`` or ``floor``.
        key_bits: Bits of its keys (16: the activation dtype).
        value_bits: Bits of its values.
        tokens: Tokens in the tier.
        allocated_tokens: Tokens its buffers have room for.
        nbytes: Bytes of those buffers.
    """

    name: str
    key_bits: int
    value_bits: int
    tokens: int
    allocated_tokens: int
    nbytes: int

    def to_dict(self) -> dict:
        """A JSON-ready dict."""
        return asdict(self)


def tiers(aging: KVAging) -> list[Tier]:
    """The tiers of an aging, newest first (empty ones left out; the floor always)."""
    result = []
    if aging.recent_tokens:
        result.append(
            Tier(RECENT, aging.recent_tokens, UNQUANTIZED, UNQUANTIZED),
        )
    if aging.band_tokens:
        result.append(
            Tier(BAND, aging.band_tokens, aging.band_key_bits, aging.band_value_bits)
        )
    result.append(Tier(FLOOR, None, aging.floor_key_bits, aging.floor_value_bits))
    return result


def tier_tokens(tokens: int, aging: KVAging) -> list[tuple[int, int]]:
    """(tokens held, tokens allocated) per tier, newest first, for a cache of ``tokens``.

    Args:
        tokens: Tokens the cache holds (grown forward).
        aging: The tiers.

    Raises:
        ValueError: A negative length.
    """
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ValueError(f"tokens must be a whole number >= 0, not {tokens!r}.")
    block = aging.block_tokens
    arriving = tokens
    result = []
    for tier in tiers(aging):
        if tier.size is None or arriving < tier.size + block:
            held = arriving
            allocated = _round_up(arriving, block)
        else:
            held = tier.size + (arriving - tier.size) % block
            allocated = tier.size + block
        result.append((held, allocated))
        arriving -= held
    return result


def tier_bytes_per_token(
    layer: LayerCache, tier: Tier, group: int, act_dtype_bytes: int
) -> int:
    """Bytes one full-attention layer stores per token in a tier.

    Raises:
        ValueError: A group that does not divide the head size, or a head size whose
            packed words at these bits would not be whole.
    """
    if not tier.quantized:
        return layer.kv_elements_per_token * act_dtype_bytes
    per_head = 0
    for dim, bits in (
        (layer.k_head_dim, tier.key_bits),
        (layer.v_head_dim, tier.value_bits),
    ):
        if dim % group:
            raise ValueError(f"KV group size {group} does not divide head_dim {dim}.")
        if dim * bits % 32:
            raise ValueError(
                f"head_dim {dim} cannot be packed at {bits} bits (MLX packs 32-bit "
                "words)."
            )
        per_head += dim * bits // 8 + 2 * act_dtype_bytes * (dim // group)
    return layer.kv_heads * per_head


def aged_tier_bytes(
    geometry: ModelGeometry,
    tokens: int,
    aging: KVAging,
    group: int = 64,
    act_dtype_bytes: int | None = None,
) -> list[TierBytes]:
    """Tokens and bytes of every tier of the full-attention layers, newest first.

    Args:
        geometry: The model.
        tokens: Tokens held.
        aging: The tiers.
        group: Quantization group of the band and the floor.
        act_dtype_bytes: Activation dtype width at run time; defaults to config.json's.

    Raises:
        ValueError: A length, group or head size that cannot work.
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    full = [layer for layer in geometry.layers if layer.kind is LayerKind.FULL]
    dims = [d for layer in full for d in (layer.k_head_dim, layer.v_head_dim)]
    validate_kv_quantization(8, group, dims)
    result = []
    for tier, (held, allocated) in zip(
        tiers(aging), tier_tokens(tokens, aging), strict=True
    ):
        per_token = sum(tier_bytes_per_token(layer, tier, group, act) for layer in full)
        result.append(
            TierBytes(
                name=tier.name,
                key_bits=tier.key_bits,
                value_bits=tier.value_bits,
                tokens=held,
                allocated_tokens=allocated,
                nbytes=allocated * per_token,
            )
        )
    return result


def aged_growing_bytes(
    geometry: ModelGeometry,
    tokens: int,
    aging: KVAging,
    group: int = 64,
    act_dtype_bytes: int | None = None,
) -> int:
    """Bytes of the full-attention layers of an aged cache holding ``tokens``."""
    return sum(
        tier.nbytes
        for tier in aged_tier_bytes(geometry, tokens, aging, group, act_dtype_bytes)
    )


def aged_kv_bytes_at(
    geometry: ModelGeometry,
    tokens: int,
    aging: KVAging,
    group: int = 64,
    act_dtype_bytes: int | None = None,
) -> int:
    """Total cache bytes of the whole model holding ``tokens`` with aged full layers.

    Sliding windows and recurrent state are counted as `kv_budget.kv_bytes_at` does.
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    if tokens == 0:
        return 0
    bounded = kv_bytes_at(geometry, tokens, 16, group, act_dtype_bytes=act) - (
        _full_unquantized_bytes(geometry, tokens, act)
    )
    return bounded + aged_growing_bytes(geometry, tokens, aging, group, act)


def _full_unquantized_bytes(geometry: ModelGeometry, tokens: int, act: int) -> int:
    steps = _round_up(tokens, ALLOCATION_STEP)
    return sum(
        steps * layer.kv_elements_per_token * act
        for layer in geometry.layers
        if layer.kind is LayerKind.FULL
    )


def aged_max_context(
    geometry: ModelGeometry,
    aging: KVAging,
    group: int,
    growing_limit_bytes: int,
    act_dtype_bytes: int | None = None,
) -> int | None:
    """The longest context (a multiple of 256) whose aged full layers fit a byte limit.

    Args:
        geometry: The model.
        aging: The tiers.
        group: Quantization group.
        growing_limit_bytes: Bytes the full-attention layers may hold.
        act_dtype_bytes: Activation dtype width at run time.

    Returns:
        Tokens; None when the model has no full-attention layer (nothing grows).
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    if not any(layer.kind is LayerKind.FULL for layer in geometry.layers):
        return None

    def fits(n: int) -> bool:
        return aged_growing_bytes(geometry, n, aging, group, act) <= growing_limit_bytes

    floor = tiers(aging)[-1]
    floor_per_token = sum(
        tier_bytes_per_token(layer, floor, group, act)
        for layer in geometry.layers
        if layer.kind is LayerKind.FULL
    )
    # Past the bounded tiers every token costs the floor's bytes: an upper bound.
    upper = (
        math.ceil(growing_limit_bytes / floor_per_token)
        + aging.recent_tokens
        + aging.band_tokens
        + 2 * aging.block_tokens
    )
    low, high = 0, _round_up(upper, ALLOCATION_STEP) // ALLOCATION_STEP
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle * ALLOCATION_STEP):
            low = middle
        else:
            high = middle - 1
    return low * ALLOCATION_STEP


def aged_max_safe_context(
    total_memory: int,
    weights_bytes: int,
    geometry: ModelGeometry,
    aging: KVAging,
    group: int,
    settings: BudgetSettings,
    *,
    act_dtype_bytes: int | None = None,
) -> int | None:
    """`memory_budget.max_safe_context` for an aged cache: the same room, its bytes.

    Returns:
        Tokens, a whole number of 256-token steps; 0 when nothing fits; None when no
        layer grows with the context.
    """
    fixed = fixed_kv_bytes(geometry, act_dtype_bytes)
    room = memory_budget_bytes(total_memory, settings) - weights_bytes - fixed
    if room <= 0:
        return 0
    return aged_max_context(
        geometry, aging, group, int(room * settings.safety_factor), act_dtype_bytes
    )


def _round_up(tokens: int, step: int) -> int:
    return -(-tokens // step) * step


def validate_aging(aging: KVAging, group: int, head_dims) -> None:
    """Check that an aging can be used on layers of these head sizes.

    Raises:
        ValueError: The group does not divide a head size, a tier's bits cannot pack
            a head size into whole 32-bit words, or key rotation is asked for a head
            size that is not a power of two; the message names the value.
    """
    dims = sorted(set(head_dims))
    validate_kv_quantization(8, group, dims)
    for tier in tiers(aging):
        if not tier.quantized:
            continue
        for dim in dims:
            for bits in (tier.key_bits, tier.value_bits):
                if dim * bits % 32:
                    raise ValueError(
                        f"KV aging: head_dim {dim} cannot be packed at {bits} bits "
                        "(MLX packs whole 32-bit words)."
                    )
    if aging.rotate_keys:
        odd = [d for d in dims if d & (d - 1)]
        if odd:
            raise ValueError(
                f"KV key rotation needs a power-of-two head size, not {odd[0]}."
            )
