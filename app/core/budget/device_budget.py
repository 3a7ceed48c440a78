"""The memory budget of one loaded model on this device, as the engine enforces it.

Combines the machine's RAM, the model's resident weights and KV geometry, and the
budget settings into the two questions asked at run time: how many tokens may a
conversation hold at a precision (the device's max safe context), and may this request
grow the KV caches by that much (checked before allocating, since MLX does not enforce
its memory limit on the CPU backend).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.budget.kv_budget import (
    bytes_per_token,
    fixed_kv_bytes,
    kv_bytes_at,
    round_up_to_step,
)
from app.core.budget.layer_breakdown import describe_precision
from app.core.budget.memory_budget import (
    BudgetSettings,
    check_kv_growth,
    kv_limit_bytes,
    max_safe_context,
)
from app.core.budget.model_geometry import ModelGeometry


@dataclass(frozen=True)
class DeviceBudget:
    """Budget numbers for one model on this machine.

    Attributes:
        total_memory: Total RAM in bytes.
        weights_bytes: Resident bytes of the loaded weights.
        geometry: The model's KV geometry.
        settings: Memory cap, reserve and safety factor.
        act_dtype_bytes: Width of the cache's unquantized elements at run time.
    """

    total_memory: int
    weights_bytes: int
    geometry: ModelGeometry
    settings: BudgetSettings
    act_dtype_bytes: int

    def max_context(self, bits: int, group: int = 64) -> int | None:
        """Max safe context at a precision (None: memory does not limit it)."""
        return max_safe_context(
            self.total_memory,
            self.weights_bytes,
            self.geometry,
            bits,
            group,
            self.settings,
            act_dtype_bytes=self.act_dtype_bytes,
        )

    def kv_bytes(self, tokens: int, bits: int, group: int = 64) -> int:
        """Bytes the whole cache holds at ``tokens`` tokens and a precision.

        Raises:
            ValueError: A precision this model cannot use.
        """
        return kv_bytes_at(
            self.geometry, tokens, bits, group, act_dtype_bytes=self.act_dtype_bytes
        )

    def kv_limit(self) -> int:
        """Bytes all KV caches together may hold."""
        fixed = fixed_kv_bytes(self.geometry, self.act_dtype_bytes)
        return kv_limit_bytes(
            self.total_memory, self.weights_bytes, self.settings, fixed
        )

    def check_growth(
        self,
        held_bytes: int,
        held_tokens: int,
        tokens_after: int,
        bits: int,
        group: int,
    ) -> None:
        """Refuse a request that would grow the KV caches past the limit.

        Args:
            held_bytes: Bytes every live cache holds now (checkpoints included).
            held_tokens: Tokens the cache that grows holds now.
            tokens_after: Tokens that cache will hold at most after the request.
            bits: Its precision.
            group: Its quantization group.

        Raises:
            BudgetError: With the sizes, the limit and which layers are at which
                precision (only full-attention layers grow, and only they are
                quantized).
        """
        extra = max(0, round_up_to_step(tokens_after) - round_up_to_step(held_tokens))
        per_token = bytes_per_token(self.geometry, bits, group, self.act_dtype_bytes)
        check_kv_growth(
            held_bytes,
            extra,
            per_token,
            self.kv_limit(),
            describe_precision(self.geometry, bits, group, self.act_dtype_bytes),
        )

    def precision(self, bits: int, group: int = 64) -> str:
        """Which layers are at which precision for a request (for reports)."""
        return describe_precision(self.geometry, bits, group, self.act_dtype_bytes)
