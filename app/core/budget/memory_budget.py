"""How much of the machine a model and its KV cache may use, and the checks that enforce it.

Swapless must refuse *before* allocating: on the CPU backend ``mx.set_memory_limit`` is
not enforced (a 2 GiB allocation passed a 0.5 GB limit) and ``set_wired_limit`` is a
no-op, so nothing below us says no until the kernel starts swapping. The budget is

    room   = total RAM x memory cap - weights - reserve - fixed KV
    tokens = room / bytes per token x safety factor, rounded down to 256-token steps

where the fixed KV part is what sliding-window and recurrent layers hold at most, plus the
checkpoints of them kept for turn reuse (`kv_budget.fixed_kv_bytes`). The
engine calls `check_model_fits` before loading, `check_request_fits` before a prompt,
and `check_kv_growth` before extending a cache.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from app.core.budget.kv_budget import (
    ALLOCATION_STEP,
    bytes_per_token,
    fixed_kv_bytes,
    round_up_to_step,
)
from app.core.budget.model_geometry import ModelGeometry
from app.core.errors import BudgetError, SettingsError
from app.core.known_keys import reject_unknown_keys

GIB = 1024**3

DEFAULT_MEMORY_CAP_FRACTION = 0.75
"""Share of total RAM that weights + KV + reserve may use. Apple's Metal driver reports
a recommended working set (``max_recommended_working_set_size``, which mlx-lm wires) of
about 75% of unified memory on larger Macs and less on small ones; the last quarter is
what the OS needs for the page cache, the compressor and wired kernel memory before it
starts paging. The same share on Linux keeps the page cache alive."""

DEFAULT_RESERVE_BYTES = 2 * GIB
"""Memory left for everything that is not the model: the desktop session, a browser or
an editor the user keeps open, Swapless's own Python/Qt process and MLX's transient
buffers during a forward pass (activations, logits). A judgment call: on an 8 GiB
machine it still leaves 4 GiB for a 4-bit 7B model and its cache, and on larger
machines the 25% left outside the cap grows with them anyway."""

DEFAULT_SAFETY_FACTOR = 0.6
"""Share of the remaining room the KV cache may fill. The formula counts only weights
and cache; the remaining 40% (two thirds of the cache at the limit) absorbs what it does
not: the transient copy of one layer's cache while it grows (measured: 12.5 MiB peak for
a 64 MiB, 8-layer cache), one extra 256-token step when a chunk is appended to a cache
of odd length, MLX's buffer cache, allocator slack, and the attention scores of a
prefill chunk *provided the chunk is small*: see `kv_budget.prefill_scores_bytes`."""

# One line per setting, for the doctor report and the settings screen.
SETTING_EXPLANATIONS = {
    "memory_cap_fraction": (
        "share of total RAM Swapless plans to use; the rest stays with the OS for "
        "its page cache and compressor (Metal's recommended working set on larger "
        "Macs is about 75% of memory too)"
    ),
    "reserve_bytes": (
        "kept free inside that share for the desktop, a browser or editor, the "
        "Swapless UI and MLX's temporary buffers"
    ),
    "safety_factor": (
        "share of the remaining room the KV cache may fill; the rest absorbs "
        "the copy made while a cache grows, allocation steps, MLX's buffer cache "
        "and the attention scores of a (small) prefill chunk"
    ),
}

# Accepted ranges: below 5% nothing useful fits, and a cap near 100% is swap by design.
MEMORY_CAP_RANGE = (0.05, 0.95)
SAFETY_FACTOR_RANGE = (0.05, 1.0)


@dataclass(frozen=True)
class BudgetSettings:
    """The user-tunable parts of the memory budget.

    Attributes:
        memory_cap_fraction: Share of total RAM Swapless may plan to use.
        reserve_bytes: Bytes kept free for the OS and other applications.
        safety_factor: Share of the remaining room the KV cache may fill.
    """

    memory_cap_fraction: float = DEFAULT_MEMORY_CAP_FRACTION
    reserve_bytes: int = DEFAULT_RESERVE_BYTES
    safety_factor: float = DEFAULT_SAFETY_FACTOR

    def __post_init__(self):
        _check_fraction(
            "memory_cap_fraction", self.memory_cap_fraction, MEMORY_CAP_RANGE
        )
        _check_fraction("safety_factor", self.safety_factor, SAFETY_FACTOR_RANGE)
        reserve = self.reserve_bytes
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            raise SettingsError(
                "Budget setting reserve_bytes must be a whole number of bytes, 0 or "
                f"more, not {reserve!r}."
            )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BudgetSettings:
        """Build settings from a dict, such as a parsed settings file.

        Raises:
            SettingsError: An unknown key (the message lists the known ones) or an
                invalid value.
        """
        reject_unknown_keys(
            data, (item.name for item in fields(cls)), "budget settings"
        )
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (the inverse of `from_dict`)."""
        return asdict(self)


def memory_budget_bytes(total_memory: int, settings: BudgetSettings) -> int:
    """Bytes weights and KV cache may share: total x cap - reserve, never negative."""
    return max(
        0, int(total_memory * settings.memory_cap_fraction) - settings.reserve_bytes
    )


def kv_limit_bytes(
    total_memory: int,
    weights_bytes: int,
    settings: BudgetSettings,
    fixed_bytes: int = 0,
) -> int:
    """The most the whole KV cache may hold, for `check_kv_growth`.

    Args:
        total_memory: Total RAM in bytes.
        weights_bytes: Resident size of the weights.
        settings: Budget settings.
        fixed_bytes: What the non-growing layers hold at most (`fixed_kv_bytes`).

    Returns:
        ``fixed_bytes`` plus the safety share of the room left after weights and them.
    """
    room = memory_budget_bytes(total_memory, settings) - weights_bytes - fixed_bytes
    return fixed_bytes + int(max(0, room) * settings.safety_factor)


def max_safe_context(
    total_memory: int,
    weights_bytes: int,
    geometry: ModelGeometry,
    bits: int,
    group: int,
    settings: BudgetSettings,
    *,
    act_dtype_bytes: int | None = None,
    state_dtype_bytes: int | None = None,
) -> int | None:
    """The longest context (prompt + generated tokens) that stays inside the budget.

    Args:
        total_memory: Total RAM in bytes.
        weights_bytes: Resident size of the weights.
        geometry: The model.
        bits: KV bits: 16 (unquantized), 8 or 4.
        group: KV quantization group size (ignored at 16 bits).
        settings: Budget settings.
        act_dtype_bytes: Width of the cache's floats at run time (2 on the CPU
            backend); defaults to config.json's.
        state_dtype_bytes: Width of recurrent state (4 on the CPU backend); defaults
            to ``act_dtype_bytes``.

    Returns:
        Tokens, rounded down to a whole 256-token allocation step so the allocation at
        that length is inside the budget; 0 when nothing fits; ``None`` when no layer's
        cache grows with the context (a pure state-space model), so memory does not
        limit it.

    Raises:
        ValueError: Invalid bits/group for this model.
    """
    per_token = bytes_per_token(geometry, bits, group, act_dtype_bytes)
    if per_token == 0:
        return None
    fixed = fixed_kv_bytes(geometry, act_dtype_bytes, state_dtype_bytes)
    room = memory_budget_bytes(total_memory, settings) - weights_bytes - fixed
    if room <= 0:
        return 0
    tokens = math.floor(room * settings.safety_factor / per_token)
    return tokens // ALLOCATION_STEP * ALLOCATION_STEP


def within_trained_context(
    memory_tokens: int | None, trained: int | None
) -> int | None:
    """A memory limit capped at the context the model was trained for.

    Past the trained context replies degrade however much memory is free, so every
    limit stops there; chat, the meter, the server and long documents all use this.

    Args:
        memory_tokens: Tokens the memory budget allows (0: nothing fits; None: memory
            does not limit it or is unknown).
        trained: ``max_position_embeddings`` from config.json, if it says (0 or None:
            unknown).

    Returns:
        The smaller of the two known limits; 0 stays 0 (nothing fits is never widened
        to the trained context); None when neither is known.
    """
    if memory_tokens is None:
        return trained or None
    return min(memory_tokens, trained) if trained else memory_tokens


def check_model_fits(
    total_memory: int, weights_bytes: int, settings: BudgetSettings
) -> int:
    """Refuse a model whose weights alone exceed the memory budget.

    Args:
        total_memory: Total RAM in bytes.
        weights_bytes: Resident size of the weights.
        settings: Budget settings.

    Returns:
        Bytes left for the KV cache (before the safety factor).

    Raises:
        BudgetError: With the weights' size, the budget and how it was computed.
    """
    budget = memory_budget_bytes(total_memory, settings)
    if weights_bytes > budget:
        raise BudgetError(
            f"This model's weights need {_gib(weights_bytes)}, more than Swapless's "
            f"memory budget of {_gib(budget)} on this machine "
            f"({settings.memory_cap_fraction:.0%} of {_gib(total_memory)} RAM minus "
            f"{_gib(settings.reserve_bytes)} kept for the system and other apps). "
            "Choose a smaller or more quantized model."
        )
    return budget - weights_bytes


def check_request_fits(
    prompt_tokens: int,
    max_tokens: int,
    limit: int | None,
    *,
    limit_name: str = "the safe limit on this machine",
    kv_bits: int | None = None,
) -> None:
    """Refuse a request whose prompt plus generation could exceed the context limit.

    Args:
        prompt_tokens: Tokens the cache will hold before generating (whole history).
        max_tokens: Most tokens the request may generate.
        limit: The safe context limit (`max_safe_context`); ``None`` for no limit.
        limit_name: What sets ``limit``, in words ("the model's trained context"):
            the advice differs, since memory is helped by a smaller KV cache and the
            trained context is not.
        kv_bits: The request's KV precision when memory sets the limit (a coarser
            one is suggested only if there is one); None suggests none.

    Raises:
        ValueError: A negative token count.
        BudgetError: With the token counts and the limit.
    """
    for name, value in (("prompt_tokens", prompt_tokens), ("max_tokens", max_tokens)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}.")
    if limit is None:
        return
    needed = prompt_tokens + max_tokens
    if needed > limit:
        advice = "Shorten the conversation or lower the maximum reply length"
        if kv_bits is not None and kv_bits > 8:
            advice += ", or use a quantized KV cache"
        elif kv_bits is not None and kv_bits > 4:
            advice += ", or use a 4-bit KV cache"
        raise BudgetError(
            f"This request needs up to {needed:,} tokens of context ({prompt_tokens:,} "
            f"in the prompt + up to {max_tokens:,} to generate) but {limit_name} is "
            f"{limit:,} tokens. {advice}."
        )


def check_kv_growth(
    current_kv_bytes: int,
    extra_tokens: int,
    bytes_per_token: int,
    limit_bytes: int,
    detail: str = "",
) -> None:
    """Refuse to extend a cache past the KV limit.

    The extra tokens are counted in whole 256-token steps, since that is what a cache
    allocates when it grows.

    Args:
        current_kv_bytes: What the cache holds now (sum of ``nbytes``).
        extra_tokens: Tokens about to be added.
        bytes_per_token: Bytes per token of the growing layers (`bytes_per_token`).
        limit_bytes: The KV limit (`kv_limit_bytes`).
        detail: Which layers are at which precision, added to the message.

    Raises:
        ValueError: A negative argument.
        BudgetError: With the current size, the growth and the limit.
    """
    for name, value in (
        ("current_kv_bytes", current_kv_bytes),
        ("extra_tokens", extra_tokens),
        ("bytes_per_token", bytes_per_token),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, not {value}.")
    growth = round_up_to_step(extra_tokens) * bytes_per_token
    check_kv_growth_bytes(current_kv_bytes, extra_tokens, growth, limit_bytes, detail)


def check_kv_growth_bytes(
    current_kv_bytes: int,
    extra_tokens: int,
    growth_bytes: int,
    limit_bytes: int,
    detail: str = "",
) -> None:
    """Refuse to grow a cache by ``growth_bytes`` past the KV limit.

    For caches whose bytes per token are not constant (aged caches): the caller
    computes what the cache will hold.

    Raises:
        BudgetError: With the current size, the growth and the limit.
    """
    if current_kv_bytes + growth_bytes > limit_bytes:
        raise BudgetError(
            f"Adding {extra_tokens:,} tokens would grow the KV cache from "
            f"{_mib(current_kv_bytes)} to {_mib(current_kv_bytes + growth_bytes)}, past "
            f"its limit of {_mib(limit_bytes)} on this machine."
            + (f" ({detail}.)" if detail else "")
        )


def _check_fraction(name: str, value: object, bounds: tuple[float, float]) -> None:
    low, high = bounds
    if (
        not isinstance(value, int | float)
        or isinstance(value, bool)
        or not low <= value <= high  # also rejects NaN
    ):
        raise SettingsError(
            f"Budget setting {name} must be a number from {low} to {high}, "
            f"not {value!r}."
        )


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
