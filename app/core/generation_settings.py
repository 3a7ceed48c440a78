"""Typed, validated settings of one generation request: KV cache precision and sampling.

Presets, the CLI and the UI all build these; the engine trusts them once constructed,
because validation happens here, on entry, with messages that name the bad value and the
allowed ones.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class KVSettings:
    """Precision of the KV cache.

    Attributes:
        bits: 16 keeps the model's activation dtype; 8 or 4 quantize keys and values.
        group_size: Elements sharing one scale and bias when quantized.
        quantized_kv_start: Tokens held before the cache switches to quantized storage.
    """

    bits: int = DEFAULT_KV_BITS
    group_size: int = DEFAULT_KV_GROUP
    quantized_kv_start: int = DEFAULT_QUANTIZED_KV_START

    def __post_init__(self):
        if self.bits not in VALID_KV_BITS:
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

    @property
    def quantized(self) -> bool:
        """True when keys and values are stored quantized."""
        return self.bits != 16


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
