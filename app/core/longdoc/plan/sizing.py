"""How big the KV cache gets for a model at a precision, and how long a context is safe.

Long-document mode decides between reading a document whole or in segments from these
numbers, and reports every choice with them, so they come from the same `app.core.budget`
arithmetic the doctor and the chat use (exact to mlx-lm's 256-token allocation steps),
fed with what the engine reports about the loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.core.budget import (
    ALLOCATION_STEP,
    BudgetSettings,
    ModelGeometry,
    kv_bytes_at,
    max_safe_context,
    read_geometry,
    within_trained_context,
)

ACTIVATION_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
"""Width of the dtypes the engine computes in (``ModelInfo.activation_dtype``)."""


@dataclass(frozen=True)
class KVSizing:
    """KV cache arithmetic for one loaded model at one KV precision.

    Attributes:
        geometry: The model's cache geometry.
        bits: KV bits (16 means unquantized, in the activation dtype).
        group: KV quantization group size.
        act_dtype_bytes: Bytes per element of the engine's activation dtype.
        max_safe_context: Longest context inside the memory budget and the context
            the model was trained for, or None when neither limits it.
        trained_context: The context the model was trained for, if config.json says.
    """

    geometry: ModelGeometry
    bits: int
    group: int
    act_dtype_bytes: int
    max_safe_context: int | None
    trained_context: int | None = None

    @property
    def limit_name(self) -> str:
        """What sets `max_safe_context`, in words for a refusal."""
        if self.trained_context and self.max_safe_context == self.trained_context:
            return f"the {self.trained_context:,} tokens the model was trained for"
        return (
            f"the {self.max_safe_context or 0:,} tokens this machine's memory holds "
            f"at {self.bits}-bit KV"
        )

    @property
    def limited_by_memory(self) -> bool:
        """Memory, not the trained context, sets the limit (a smaller KV cache helps)."""
        return self.max_safe_context is not None and self.max_safe_context != (
            self.trained_context or None
        )

    def kv_bytes(self, tokens: int) -> int:
        """Most bytes the whole cache allocates while holding up to ``tokens`` tokens.

        One allocation step more than ``kv_bytes_at``: a cache that grows from a
        length that is not a multiple of 256 (here: the cached prefix) allocates up to
        255 tokens past what it holds (measured: 13,876 allocated for 13,799 held).
        """
        return kv_bytes_at(
            self.geometry,
            tokens + ALLOCATION_STEP - 1 if tokens else 0,
            self.bits,
            self.group,
            act_dtype_bytes=self.act_dtype_bytes,
        )


def kv_sizing(
    model_folder: str | Path,
    weights_bytes: int,
    activation_dtype: str,
    bits: int,
    group: int,
    *,
    total_memory: int | None = None,
    settings: BudgetSettings | None = None,
) -> KVSizing:
    """Return the KV arithmetic of a loaded model.

    Args:
        model_folder: The model folder (its config.json gives the geometry).
        weights_bytes: Resident size of the loaded weights.
        activation_dtype: The engine's activation dtype name, e.g. ``float32``.
        bits: KV bits.
        group: KV group size.
        total_memory: Total RAM in bytes; defaults to this machine's.
        settings: Budget settings; defaults to `BudgetSettings()`.

    Raises:
        ModelLoadError: config.json is missing or unusable.
        ValueError: An unknown activation dtype, or a group that does not divide the
            model's head size.
    """
    if activation_dtype not in ACTIVATION_DTYPE_BYTES:
        raise ValueError(
            f"activation dtype must be one of {', '.join(ACTIVATION_DTYPE_BYTES)}, "
            f"not {activation_dtype!r}"
        )
    if total_memory is None:
        import psutil

        total_memory = psutil.virtual_memory().total
    geometry = read_geometry(Path(model_folder))
    act = ACTIVATION_DTYPE_BYTES[activation_dtype]
    safe = max_safe_context(
        total_memory,
        weights_bytes,
        geometry,
        bits,
        group,
        settings or BudgetSettings(),
        act_dtype_bytes=act,
    )
    trained = geometry.max_position_embeddings or None
    safe = within_trained_context(safe, trained)
    return KVSizing(geometry, bits, group, act, safe, trained)
