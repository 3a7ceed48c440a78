"""The cache of a model by layer kind: how many layers, what each costs, at what precision.

The doctor prints it, the engine's guard names it when it refuses a request, and the
meter shows the same split live (`app.core.engine.events.LayerGroup`). One rule decides
precision everywhere: a requested KV precision of 8 or 4 bits applies to the
full-attention layers (the only ones that grow); sliding-window and recurrent layers are
bounded and stay at the activation dtype (16 here means "unquantized").
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.budget.kv_budget import (
    STATE_CHECKPOINTS,
    UNQUANTIZED_BITS,
    checkpoint_bytes,
    layer_bytes_per_token,
    resolve_act_bytes,
)
from app.core.budget.layers import LayerCache, LayerKind
from app.core.budget.model_geometry import ModelGeometry
from app.core.presets.generation_settings import KVAging

KIND_LABELS = {
    LayerKind.FULL: "full attention",
    LayerKind.SLIDING: "sliding window",
    LayerKind.STATE: "constant state",
}


@dataclass(frozen=True)
class KindBudget:
    """Layers of one kind and geometry, at the precision a request gives them.

    Attributes:
        kind: The layer kind.
        count: How many cache entries have this kind and geometry.
        bits: Their precision for the request (16: unquantized).
        kv_heads: Key/value heads (0 for a constant state).
        k_head_dim: Key elements per head per token.
        v_head_dim: Value elements per head per token.
        window: Tokens kept, for sliding layers.
        bytes_per_token: Bytes these layers add per token (full attention only).
        fixed_bytes: The most these layers hold (sliding and state; 0 for full).
    """

    kind: LayerKind
    count: int
    bits: int
    kv_heads: int
    k_head_dim: int
    v_head_dim: int
    window: int | None
    bytes_per_token: int
    fixed_bytes: int

    def to_dict(self) -> dict:
        """A JSON-ready dict (``kind`` as its string value)."""
        return {
            "kind": self.kind.value,
            "layers": self.count,
            "bits": self.bits,
            "kv_heads": self.kv_heads,
            "k_head_dim": self.k_head_dim,
            "v_head_dim": self.v_head_dim,
            "window": self.window,
            "bytes_per_token": self.bytes_per_token,
            "fixed_bytes": self.fixed_bytes,
        }


def layer_breakdown(
    geometry: ModelGeometry,
    bits: int = UNQUANTIZED_BITS,
    group: int = 64,
    act_dtype_bytes: int | None = None,
    state_dtype_bytes: int | None = None,
) -> list[KindBudget]:
    """Group a model's cache entries by kind and geometry, in order of appearance.

    Args:
        geometry: The model.
        bits: Requested KV precision (applies to full-attention layers only).
        group: Quantization group size.
        act_dtype_bytes: Activation dtype width at run time; defaults to config.json's.

    Returns:
        One `KindBudget` per distinct (kind, geometry).
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    counts: dict[LayerCache, int] = {}
    for layer in geometry.layers:
        counts[layer] = counts.get(layer, 0) + 1
    result = []
    for layer, count in counts.items():
        layer_bits = bits if layer.kind is LayerKind.FULL else UNQUANTIZED_BITS
        per_token = layer_bytes_per_token(layer, layer_bits, group, act)
        fixed = 0
        if layer.kind is LayerKind.SLIDING:
            fixed = count * (layer.window or 0) * per_token
        elif layer.kind is LayerKind.STATE:
            fixed = count * layer.state_bytes(state_dtype_bytes or act)
        result.append(
            KindBudget(
                kind=layer.kind,
                count=count,
                bits=layer_bits,
                kv_heads=layer.kv_heads,
                k_head_dim=layer.k_head_dim,
                v_head_dim=layer.v_head_dim,
                window=layer.window,
                bytes_per_token=count * per_token
                if layer.kind is LayerKind.FULL
                else 0,
                fixed_bytes=fixed,
            )
        )
    return result


def describe_precision(
    geometry: ModelGeometry,
    bits: int,
    group: int = 64,
    act_dtype_bytes: int | None = None,
    *,
    aging: KVAging | None = None,
) -> str:
    """One sentence on which layers are at which precision, for messages.

    E.g. "5 full-attention layers at 8-bit (group 64); 29 sliding-window layers at
    2 bytes/element (not quantized); 3 state checkpoints of them set aside", or for an
    aged cache "2 full-attention layers aged: 512 at 4 bytes/element, then 8-bit
    (group 64)".
    """
    act = resolve_act_bytes(geometry, act_dtype_bytes)
    totals: dict[LayerKind, int] = {}
    for layer in geometry.layers:
        totals[layer.kind] = totals.get(layer.kind, 0) + 1
    parts = []
    for kind in (LayerKind.FULL, LayerKind.SLIDING, LayerKind.STATE):
        count = totals.get(kind)
        if not count:
            continue
        label = KIND_LABELS[kind].replace(" ", "-")
        noun = "layer" if count == 1 else "layers"
        if kind is LayerKind.FULL and aging is not None:
            parts.append(
                f"{count} {label} {noun} aged: "
                f"{aging.label(f'at {act} bytes/element')} (group {group})"
            )
            continue
        if kind is LayerKind.FULL and bits != UNQUANTIZED_BITS:
            precision = f"{bits}-bit (group {group})"
        else:
            precision = f"{act} bytes/element (not quantized)"
        parts.append(f"{count} {label} {noun} at {precision}")
    if checkpoint_bytes(geometry, act):
        parts.append(f"{STATE_CHECKPOINTS} state checkpoints of the bounded layers")
    return "; ".join(parts)
