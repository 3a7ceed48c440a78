"""Typed, validated settings of one generation request: KV cache precision and sampling.

Presets, the CLI and the UI all build these; the engine trusts them once constructed,
because validation happens here, on entry, with messages that name the bad value and the
allowed ones.

The KV cache's precision is either uniform (``KVSettings.bits`` for every token) or
*aged* (`KVAging`): the newest tokens at the activation dtype, an optional band of older
ones at a middle precision, the oldest at a floor, with keys allowed more bits than
values. Tier sizes and the block by which tokens move down a tier are settings, so the
memory budget can count the bytes of every tier exactly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VALID_KV_BITS = (16, 8, 4)
VALID_KV_GROUPS = (32, 64, 128)
DEFAULT_KV_BITS = 8
DEFAULT_KV_GROUP = 64
# mlx-lm waits 5000 tokens before quantizing the KV cache; Swapless quantizes from the
# first token by default because the memory budget assumes the chosen precision.
DEFAULT_QUANTIZED_KV_START = 0
DEFAULT_MAX_TOKENS = 512
DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 0.95
MAX_SEED = 2**64 - 1
"""MLX seeds are unsigned 64-bit integers."""
TIER_BITS = (8, 6, 5, 4, 3, 2)
"""Bits a quantized tier of an aged cache may hold keys or values at (MLX's widths)."""
VALID_AGE_BLOCKS = (64, 128, 256, 512)
DEFAULT_AGE_BLOCK = 256
"""Tokens moved down a tier at once: mlx-lm's allocation step, so tiers stay aligned."""
MAX_TIER_TOKENS = 1_048_576


@dataclass(frozen=True)
class KVAging:
    """Precision tiers by age for the full-attention KV cache.

    From newest to oldest: ``recent_tokens`` at the activation dtype, then
    ``band_tokens`` at ``band_key_bits``/``band_value_bits``, then every older token at
    ``floor_key_bits``/``floor_value_bits``. Tokens move down a tier ``block_tokens`` at
    a time, once a tier holds a whole block more than its size, so a tier holds between
    its size and its size plus one block. With ``recent_tokens`` 0 new tokens are
    quantized on arrival (``recent_tokens`` and ``band_tokens`` both 0 is a uniform
    cache, possibly with keys wider than values).

    Attributes:
        recent_tokens: Newest tokens kept unquantized (a multiple of the block).
        band_tokens: Tokens after them at the band's precision (a multiple of the
            block; 0 for no band).
        band_key_bits: Bits of the band's keys.
        band_value_bits: Bits of the band's values.
        floor_key_bits: Bits of the oldest tokens' keys.
        floor_value_bits: Bits of the oldest tokens' values.
        block_tokens: Tokens moved down a tier at once.
        rotate_keys: Store quantized keys after a fixed Hadamard rotation (queries are
            rotated the same way, so scores are unchanged); needs a power-of-two head
            size.
    """

    recent_tokens: int = 1024
    band_tokens: int = 0
    band_key_bits: int = 8
    band_value_bits: int = 8
    floor_key_bits: int = 8
    floor_value_bits: int = 8
    block_tokens: int = DEFAULT_AGE_BLOCK
    rotate_keys: bool = False

    def __post_init__(self):
        if self.block_tokens not in VALID_AGE_BLOCKS:
            raise ValueError(
                "KV aging block must be one of "
                f"{', '.join(map(str, VALID_AGE_BLOCKS))} tokens, "
                f"got {self.block_tokens!r}"
            )
        for name in ("recent_tokens", "band_tokens"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_TIER_TOKENS
                or value % self.block_tokens
            ):
                raise ValueError(
                    f"KV aging {name} must be a whole multiple of the block "
                    f"({self.block_tokens} tokens) from 0 to {MAX_TIER_TOKENS}, "
                    f"got {value!r}"
                )
        for name in (
            "band_key_bits",
            "band_value_bits",
            "floor_key_bits",
            "floor_value_bits",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or value not in TIER_BITS:
                raise ValueError(
                    f"KV aging {name} must be one of "
                    f"{', '.join(map(str, TIER_BITS))}, got {value!r}"
                )
        if self.band_tokens:
            for part in ("key", "value"):
                band = getattr(self, f"band_{part}_bits")
                floor = getattr(self, f"floor_{part}_bits")
                if floor > band:
                    raise ValueError(
                        f"KV aging: the oldest tokens' {part}s ({floor}-bit) cannot "
                        f"be more precise than the band's ({band}-bit)"
                    )
        if not isinstance(self.rotate_keys, bool):
            raise ValueError(
                f"KV aging rotate_keys must be true or false, got {self.rotate_keys!r}"
            )

    @property
    def spec(self) -> str:
        """A short stable text of the tiers, e.g. ``r512+b2048k8v4+k4v4/256``.

        Used in cache keys (a prefix stored under one aging never serves another) and
        reports.
        """
        parts = [f"r{self.recent_tokens}"]
        if self.band_tokens:
            parts.append(
                f"b{self.band_tokens}k{self.band_key_bits}v{self.band_value_bits}"
            )
        parts.append(f"k{self.floor_key_bits}v{self.floor_value_bits}")
        text = "+".join(parts) + f"/{self.block_tokens}"
        return text + ("h" if self.rotate_keys else "")

    @classmethod
    def from_spec(cls, spec: str) -> KVAging:
        """Parse `spec` back (the inverse of `spec`).

        Raises:
            ValueError: ``spec`` is not an aging spec.
        """
        match = _SPEC.fullmatch(spec or "")
        if match is None:
            raise ValueError(f"not a KV aging spec: {spec!r}")
        band = match["band"]
        return cls(
            recent_tokens=int(match["recent"]),
            band_tokens=int(band) if band else 0,
            band_key_bits=int(match["bk"] or 8),
            band_value_bits=int(match["bv"] or 8),
            floor_key_bits=int(match["fk"]),
            floor_value_bits=int(match["fv"]),
            block_tokens=int(match["block"]),
            rotate_keys=bool(match["rotate"]),
        )

    def label(self, activation: str = "exact") -> str:
        """The tiers in words, newest first: ``512 exact, 2,048 at K8/V4, then K4/V4``."""
        parts = []
        if self.recent_tokens:
            parts.append(f"{self.recent_tokens:,} {activation}")
        if self.band_tokens:
            parts.append(
                f"{self.band_tokens:,} at "
                f"{_kv_bits(self.band_key_bits, self.band_value_bits)}"
            )
        floor = _kv_bits(self.floor_key_bits, self.floor_value_bits)
        parts.append(f"then {floor}" if parts else f"all at {floor}")
        text = ", ".join(parts)
        return text + (" (keys rotated)" if self.rotate_keys else "")


_SPEC = re.compile(
    r"r(?P<recent>\d+)(?:\+b(?P<band>\d+)k(?P<bk>\d)v(?P<bv>\d))?"
    r"\+k(?P<fk>\d)v(?P<fv>\d)/(?P<block>\d+)(?P<rotate>h?)"
)


def _kv_bits(key_bits: int, value_bits: int) -> str:
    if key_bits == value_bits:
        return f"{key_bits}-bit"
    return f"K{key_bits}/V{value_bits}"


@dataclass(frozen=True)
class KVSettings:
    """Precision of the KV cache.

    Attributes:
        bits: 16 keeps the model's activation dtype; 8 or 4 quantize keys and values.
            With ``aging``, the oldest tokens' key bits (what "the cache's precision"
            means for reports and budgets that name one number).
        group_size: Elements sharing one scale and bias when quantized.
        quantized_kv_start: Tokens held before the cache switches to quantized storage
            (uniform caches; an aged cache's tiers decide that themselves).
        aging: Precision tiers by age, or None for one precision throughout.
    """

    bits: int = DEFAULT_KV_BITS
    group_size: int = DEFAULT_KV_GROUP
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START
    aging: KVAging | None = None

    def __post_init__(self):
        if self.aging is not None:
            if not isinstance(self.aging, KVAging):
                raise ValueError(f"aging must be a KVAging, got {self.aging!r}")
            if self.bits != self.aging.floor_key_bits:
                raise ValueError(
                    f"kv_bits ({self.bits!r}) must be the aged cache's floor key "
                    f"bits ({self.aging.floor_key_bits})"
                )
        elif self.bits not in VALID_KV_BITS:
            raise ValueError(
                f"kv_bits must be one of {', '.join(map(str, VALID_KV_BITS))}, "
                f"got {self.bits!r}"
            )
        if self.group_size not in VALID_KV_GROUPS:
            raise ValueError(
                f"kv_group must be one of {', '.join(map(str, VALID_KV_GROUPS))}, "
                f"got {self.group_size!r}"
            )
        if not isinstance(self.quantized_kv_start, int) or self.quantized_kv_start < 0:
            raise ValueError(
                "quantized_kv_start must be a whole number >= 0, "
                f"got {self.quantized_kv_start!r}"
            )

    @classmethod
    def aged(cls, aging: KVAging, group_size: int = DEFAULT_KV_GROUP) -> KVSettings:
        """Aged settings: ``bits`` is the floor's key bits."""
        return cls(bits=aging.floor_key_bits, group_size=group_size, aging=aging)

    @property
    def quantized(self) -> bool:
        """True when keys and values are stored quantized (some of them, when aged)."""
        return self.bits != 16

    @property
    def spec(self) -> str:
        """A short stable text of the precision (``8`` or an aging spec), for keys."""
        return self.aging.spec if self.aging is not None else str(self.bits)


@dataclass(frozen=True)
class SamplingSettings:
    """How tokens are picked and how many.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: Nucleus sampling threshold in (0, 1].
        max_tokens: Upper bound on generated tokens per reply.
        seed: Random seed for sampling, or None for a fresh one.
    """

    temperature: float = DEFAULT_TEMPERATURE
    top_p: float = DEFAULT_TOP_P
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None

    def __post_init__(self):
        if not 0.0 <= self.temperature <= 5.0:
            raise ValueError(
                f"temperature must be between 0 and 5, got {self.temperature!r}"
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(
                f"max_tokens must be a whole number >= 1, got {self.max_tokens!r}"
            )
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed <= MAX_SEED
        ):
            raise ValueError(
                f"seed must be a whole number from 0 to {MAX_SEED}, got {self.seed!r}"
            )
