"""The memory budget of one loaded model on this device, as the engine enforces it.

Combines the machine's RAM, the model's resident weights and KV geometry, and the
budget settings into the two questions asked at run time: how many tokens may a
conversation hold at a precision (the device's max safe context), and may this request
grow the KV caches by that much (checked before allocating, since MLX does not enforce
its memory limit on the CPU backend).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.budget.aged_budget import (
    TierBytes,
    aged_growing_bytes,
    aged_kv_bytes_at,
    aged_max_safe_context,
    aged_tier_bytes,
)
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
    check_kv_growth_bytes,
    kv_limit_bytes,
    max_safe_context,
)
from app.core.budget.model_geometry import ModelGeometry
from app.core.budget.prefill_budget import chunk_allowance, largest_chunk
from app.core.presets.generation_settings import KVAging


@dataclass(frozen=True)
class DeviceBudget:
    """Budget numbers for one model on this machine.

    Attributes:
        total_memory: Total RAM in bytes.
        weights_bytes: Resident bytes of the loaded weights.
        geometry: The model's KV geometry.
        settings: Memory cap, reserve and safety factor.
        act_dtype_bytes: Width of the cache's unquantized elements (and of a
            quantized cache's scales) at run time.
        state_dtype_bytes: Width of recurrent state (None: ``act_dtype_bytes``).
        activation_bytes_per_token: Transient bytes a prompt token adds to a prefill
            chunk's forward pass (`prefill_budget.activation_bytes_per_token`).
    """

    total_memory: int
    weights_bytes: int
    geometry: ModelGeometry
    settings: BudgetSettings
    act_dtype_bytes: int
    state_dtype_bytes: int | None = None
    activation_bytes_per_token: int = 0

    def prefill_chunk(self, context: int, ceiling: int) -> int:
        """The largest prefill chunk (at most ``ceiling``) whose buffers fit the budget
        beside a full KV cache, on top of ``context`` cached tokens."""
        fixed = fixed_kv_bytes(
            self.geometry, self.act_dtype_bytes, self.state_dtype_bytes
        )
        allowance = chunk_allowance(
            self.total_memory, self.weights_bytes, fixed, self.settings
        )
        return largest_chunk(
            self.geometry,
            context,
            allowance,
            self.activation_bytes_per_token,
            # Activations are as wide as recurrent state (float32 on the CPU backend).
            self.state_dtype_bytes or self.act_dtype_bytes,
            ceiling,
        )

    def max_context(
        self, bits: int, group: int = 64, aging: KVAging | None = None
    ) -> int | None:
        """Max safe context at a precision (None: memory does not limit it)."""
        if aging is not None:
            return aged_max_safe_context(
                self.total_memory,
                self.weights_bytes,
                self.geometry,
                aging,
                group,
                self.settings,
                act_dtype_bytes=self.act_dtype_bytes,
            )
        return max_safe_context(
            self.total_memory,
            self.weights_bytes,
            self.geometry,
            bits,
            group,
            self.settings,
            act_dtype_bytes=self.act_dtype_bytes,
            state_dtype_bytes=self.state_dtype_bytes,
        )

    def kv_bytes(
        self, tokens: int, bits: int, group: int = 64, aging: KVAging | None = None
    ) -> int:
        """Bytes the whole cache holds at ``tokens`` tokens and a precision.

        Raises:
            ValueError: A precision this model cannot use.
        """
        if aging is not None:
            return aged_kv_bytes_at(
                self.geometry, tokens, aging, group, self.act_dtype_bytes
            )
        return kv_bytes_at(
            self.geometry,
            tokens,
            bits,
            group,
            act_dtype_bytes=self.act_dtype_bytes,
            state_dtype_bytes=self.state_dtype_bytes,
        )

    def kv_limit(self) -> int:
        """Bytes all KV caches together may hold."""
        fixed = fixed_kv_bytes(
            self.geometry, self.act_dtype_bytes, self.state_dtype_bytes
        )
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
        aging: KVAging | None = None,
    ) -> None:
        """Refuse a request that would grow the KV caches past the limit.

        Args:
            held_bytes: Bytes every live cache holds now (checkpoints included).
            held_tokens: Tokens the cache that grows holds now.
            tokens_after: Tokens that cache will hold at most after the request.
            bits: Its precision.
            group: Its quantization group.
            aging: Its tiers, when aged (the growth is then the difference of the
                aged bytes at the two lengths).

        Raises:
            BudgetError: With the sizes, the limit and which layers are at which
                precision (only full-attention layers grow, and only they are
                quantized).
        """
        if aging is not None:
            growth = max(
                0,
                aged_growing_bytes(
                    self.geometry, tokens_after, aging, group, self.act_dtype_bytes
                )
                - aged_growing_bytes(
                    self.geometry, held_tokens, aging, group, self.act_dtype_bytes
                ),
            )
            check_kv_growth_bytes(
                held_bytes,
                max(0, tokens_after - held_tokens),
                growth,
                self.kv_limit(),
                self.precision(bits, group, aging),
            )
            return
        extra = max(0, round_up_to_step(tokens_after) - round_up_to_step(held_tokens))
        per_token = bytes_per_token(self.geometry, bits, group, self.act_dtype_bytes)
        check_kv_growth(
            held_bytes,
            extra,
            per_token,
            self.kv_limit(),
            describe_precision(self.geometry, bits, group, self.act_dtype_bytes),
        )

    def precision(
        self, bits: int, group: int = 64, aging: KVAging | None = None
    ) -> str:
        """Which layers are at which precision for a request (for reports)."""
        return describe_precision(
            self.geometry, bits, group, self.act_dtype_bytes, aging=aging
        )

    def tiers(self, tokens: int, aging: KVAging, group: int = 64) -> list[TierBytes]:
        """Tokens and bytes per tier of an aged cache holding ``tokens``.

        Raises:
            ValueError: An aging this model cannot use.
        """
        return aged_tier_bytes(
            self.geometry, tokens, aging, group, self.act_dtype_bytes
        )
