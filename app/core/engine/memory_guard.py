"""Budget checks that need the engine's view: before a load, and the device limits.

Swapless refuses a model whose weights alone pass the memory budget before loading it
(on the CPU backend they are counted as the engine will hold them: packed when the
native kernel will serve every quantized layer, else dequantized to float32), checks
the loaded model again with its measured bytes (the kernel's self-test may have failed
and left float32 weights), builds the `DeviceBudget` of a loaded model, and on Metal
also sets MLX's own memory and wired limits from it (on the CPU backend MLX ignores
them).
"""

from __future__ import annotations

import logging
from pathlib import Path

import psutil

from app.core.budget.device_budget import DeviceBudget
from app.core.budget.kv_budget import ALLOCATION_STEP, bytes_per_token
from app.core.budget.memory_budget import (
    BudgetSettings,
    check_model_fits,
    check_request_fits,
    memory_budget_bytes,
    within_trained_context,
)
from app.core.budget.memory_budget import max_safe_context as context_that_fits
from app.core.budget.model_geometry import read_geometry
from app.core.budget.prefill_budget import activation_bytes_per_token
from app.core.budget.runtime_profile import profile_for_backend, resident_weights_bytes
from app.core.budget.weights_check import check_layers_present
from app.core.engine.cpu import backend, native_build
from app.core.engine.events import ModelInfo
from app.core.errors import BudgetError, ModelLoadError
from app.core.files import bounded_read
from app.core.presets.generation_settings import KVSettings

# The most compact KV precisions first: a model refused at these cannot run at all.
COMPACT_FIRST = ((4, 128), (4, 64), (4, 32), (8, 32), (16, 64))

logger = logging.getLogger(__name__)


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def settings_or_default(settings: BudgetSettings | None) -> BudgetSettings:
    """Return ``settings`` or the defaults."""
    return settings if settings is not None else BudgetSettings()


def total_memory() -> int:
    """Total RAM of this machine in bytes."""
    return int(psutil.virtual_memory().total)


def check_before_load(folder: str | Path, settings: BudgetSettings) -> None:
    """Refuse, with the numbers, a model that cannot work in the budget.

    Refused: a config.json declaring more layers than its weights hold (mlx-lm
    would build them all before noticing), weights that alone exceed the budget, and
    a model with no room left for even one 256-token step of KV cache at the most
    compact precision. Folders that cannot be judged here (missing files) are left
    to the loader, which explains what is wrong with them.

    Raises:
        ModelLoadError: The config does not match the weights.
        BudgetError: The model does not fit.
    """
    folder = Path(folder).expanduser()
    try:
        config = bounded_read.read_json(
            folder / "config.json", what="The model configuration"
        )
        if not isinstance(config, dict):
            return
    except (OSError, bounded_read.FileReadError):
        return  # the loader says what is wrong with it
    check_layers_present(folder, config)
    try:
        estimate = resident_weights_bytes(folder, config, _profile())
    except ModelLoadError as exc:
        # A model whose memory use cannot be worked out would run with no budget.
        raise ModelLoadError(_unknown_geometry(folder, exc)) from exc
    except (OSError, ValueError):
        return
    check_model_fits(total_memory(), estimate, settings)
    _check_room_for_context(folder, estimate, settings)


def _profile():
    metal = backend.uses_metal()
    return profile_for_backend(
        metal, native_kernel=not metal and native_build.available()
    )


def _check_room_for_context(
    folder: Path, weights_bytes: int, settings: BudgetSettings
) -> None:
    try:
        geometry = read_geometry(folder)
    except ModelLoadError as exc:
        raise ModelLoadError(_unknown_geometry(folder, exc)) from exc
    profile = _profile()
    act = profile.kv_dtype_bytes
    best: int | None = None
    for bits, group in COMPACT_FIRST:
        try:
            tokens = context_that_fits(
                total_memory(),
                weights_bytes,
                geometry,
                bits,
                group,
                settings,
                act_dtype_bytes=act,
                state_dtype_bytes=profile.act_dtype_bytes,
            )
        except ValueError:  # a group that does not divide this model's head size
            continue
        best = tokens
        break
    if best == 0:
        raise BudgetError(
            f"Model {folder.name}: after its weights, the memory budget leaves no room "
            f"for even {ALLOCATION_STEP} tokens of KV cache at {bits}-bit "
            f"({_mib(bytes_per_token(geometry, bits, group, act))} per token). Choose a "
            "smaller model or raise the memory cap in Settings."
        )


def _unknown_geometry(folder: Path, exc: ModelLoadError) -> str:
    return (
        f"Swapless cannot work out how much memory {Path(folder).name} needs, so it "
        f"does not load it (it would run with no memory budget): {exc}"
    )


def device_budget(info: ModelInfo, settings: BudgetSettings) -> DeviceBudget:
    """Return the budget of a loaded model, checked with its measured bytes.

    The estimate `check_before_load` judged may have counted packed weights that the
    engine then widened to float32 (the native kernel's self-test failed): the loaded
    model's own parameter bytes decide now, and a model that no longer fits is not
    kept.

    Raises:
        ModelLoadError: Its KV geometry cannot be read from config.json (the message
            names the key). The memory promise has no "unknown": such a model is
            not kept loaded.
        BudgetError: Its measured weights leave no room in the budget.
    """
    try:
        geometry = read_geometry(Path(info.folder))
    except ModelLoadError as exc:
        raise ModelLoadError(_unknown_geometry(Path(info.folder), exc)) from exc
    check_model_fits(total_memory(), info.weights_bytes, settings)
    _check_room_for_context(Path(info.folder), info.weights_bytes, settings)
    act_bytes = dtype_bytes(info.activation_dtype)
    hidden, intermediate = _layer_widths(Path(info.folder), geometry)
    return DeviceBudget(
        total_memory=total_memory(),
        weights_bytes=info.weights_bytes,
        geometry=geometry,
        settings=settings,
        act_dtype_bytes=dtype_bytes(info.kv_dtype),
        state_dtype_bytes=act_bytes,
        activation_bytes_per_token=activation_bytes_per_token(
            geometry, hidden, intermediate, act_bytes
        ),
    )


def _layer_widths(folder: Path, geometry) -> tuple[int, int]:
    """Hidden and (largest) MLP intermediate size from config.json, for the prefill
    chunk's activations; when the config does not say, the usual 4x of the heads' width.
    """
    try:
        config = bounded_read.read_json(
            folder / "config.json", what="The model configuration"
        )
    except (OSError, bounded_read.FileReadError):
        config = {}
    if isinstance(config, dict) and isinstance(config.get("text_config"), dict):
        config = config["text_config"]
    if not isinstance(config, dict):
        config = {}

    def width(*keys: str) -> int:
        values = [config.get(key) for key in keys]
        numbers = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
        return max(numbers, default=0)

    hidden = width("hidden_size", "d_model") or (
        geometry.num_attention_heads * geometry.head_dim
    )
    intermediate = width(
        "intermediate_size", "moe_intermediate_size", "ffn_hidden_size"
    ) or (4 * hidden)
    return hidden, intermediate


def dtype_bytes(name: str) -> int:
    """Bytes per element of a float dtype named as `ModelInfo` names it."""
    return 4 if name == "float32" else 2


def apply_backend_limits(budget: DeviceBudget | None) -> None:
    """On Metal, let MLX enforce the budget too; a no-op on the CPU backend."""
    if budget is None or not backend.uses_metal():
        return
    import mlx.core as mx

    limit = memory_budget_bytes(budget.total_memory, budget.settings)
    mx.set_memory_limit(limit)
    wired = min(budget.weights_bytes + budget.kv_limit(), limit)
    try:
        recommended = int(mx.device_info()["max_recommended_working_set_size"])
        wired = min(wired, recommended)
    except (KeyError, RuntimeError, AttributeError):
        pass
    mx.set_wired_limit(wired)


def max_safe_context(
    budget: DeviceBudget | None, bits: int, group: int, aging=None
) -> int | None:
    """Tokens a conversation may hold at a KV precision on this device.

    The memory budget's max safe context, and never more than the context the model
    was trained for (past it, replies degrade even with memory to spare). None when
    neither is known. ``aging`` (a `KVAging`) counts an aged cache's tiers.
    """
    if budget is None:
        return None
    try:
        memory = budget.max_context(bits, group, aging)
    except ValueError:
        memory = None
    return within_trained_context(memory, budget.geometry.max_position_embeddings)


def _request_limit(
    budget: DeviceBudget | None, max_context: int | None, kv: KVSettings
) -> tuple[int | None, str, int | None]:
    """The tightest context limit of a request, what sets it, and the KV bits to name.

    Returns:
        The limit (None: none), its name in words, and the KV bits when memory sets
        it (a smaller KV cache then helps; with the other limits it does not).
    """
    named: list[tuple[int, str, int | None]] = []
    if max_context is not None:
        named.append((max_context, "this conversation's context limit", None))
    if budget is not None:
        trained = budget.geometry.max_position_embeddings
        if trained:
            named.append((trained, "the model's trained context", None))
        try:
            memory = budget.max_context(kv.bits, kv.group_size, kv.aging)
        except ValueError:
            memory = None
        if memory is not None:
            name = f"the safe limit of this machine's memory at {kv.bits}-bit KV"
            named.append((memory, name, kv.bits))
    if not named:
        return None, "", None
    # Ties go to the limit listed first: the user's own setting, then the model's.
    return min(named, key=lambda entry: entry[0])


def check_request(
    budget: DeviceBudget | None,
    *,
    max_context: int | None,
    held_bytes: int,
    cache_tokens: int,
    prompt_tokens: int,
    max_tokens: int,
    kv: KVSettings,
) -> None:
    """Refuse, before allocating, a request that does not fit its limits.

    Args:
        budget: The loaded model's budget (None: only ``max_context`` is checked).
        max_context: The conversation's own limit, if any.
        held_bytes: Bytes every live KV cache (and the prefix cache) holds now.
        cache_tokens: Tokens the cache that grows holds now.
        prompt_tokens: Tokens of the request's whole prompt.
        max_tokens: Tokens the reply may add.
        kv: The request's KV precision.

    Raises:
        BudgetError: With the numbers.
    """
    limit, limit_name, kv_bits = _request_limit(budget, max_context, kv)
    if limit is not None:
        check_request_fits(
            prompt_tokens, max_tokens, limit, limit_name=limit_name, kv_bits=kv_bits
        )
    if budget is not None:
        budget.check_growth(
            held_bytes,
            cache_tokens,
            prompt_tokens + max_tokens,
            kv.bits,
            kv.group_size,
            kv.aging,
        )


def admit_request(
    budget: DeviceBudget | None,
    caches,
    prefix_bytes: int,
    *,
    key: str,
    cache,
    max_context: int | None,
    prompt_tokens: int,
    max_tokens: int,
    kv: KVSettings,
) -> None:
    """Let a request in only if it fits, making room among the idle caches first.

    Idle caches are what the LRU may drop: when the request fits alone but not beside
    them, the least recently used ones go first (their conversations re-prefill on
    their next turn), so all caches stay inside the budget.

    Args:
        budget: The loaded model's budget.
        caches: The engine's `CacheRegistry`.
        prefix_bytes: Bytes the in-memory prefix cache holds.
        key: The request's cache key (never dropped).
        cache: Its cache.
        max_context: The conversation's own limit, if any.
        prompt_tokens: Tokens of the whole prompt.
        max_tokens: Tokens the reply may add.
        kv: The request's KV precision.

    Raises:
        BudgetError: It does not fit even with every idle cache gone.
    """

    def check(held: int) -> None:
        check_request(
            budget,
            max_context=max_context,
            held_bytes=held + prefix_bytes,
            cache_tokens=cache.offset,
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            kv=kv,
        )

    check(cache.nbytes)  # refused even with every idle cache gone
    while True:
        try:
            check(caches.total_bytes())
            return
        except BudgetError:
            if caches.drop_oldest_idle(keep=key) is None:
                raise
