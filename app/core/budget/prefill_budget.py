"""How many prompt tokens one prefill chunk may take within the memory budget.

A chunk's forward pass holds transient buffers the KV cache does not count: the hidden
states and MLP activations of every token in the chunk, and one layer's attention
scores (query heads x chunk x keys). The budget (`memory_budget`) keeps a share of its
room outside the KV cache's limit for such things (``1 - safety_factor`` of the room);
half of that share is what a chunk may use (`chunk_allowance`), the other half stays
for what the safety factor already absorbs (the copy of a layer's cache while it grows,
allocation steps, MLX's buffer cache). `largest_chunk` picks the largest chunk, in
steps of `CHUNK_STEP` tokens, whose buffers fit that allowance at the context it
attends to, so prefill chunks are as large as the promise not to swap allows.
"""

from __future__ import annotations

from app.core.budget.kv_budget import prefill_scores_bytes
from app.core.budget.memory_budget import BudgetSettings, memory_budget_bytes
from app.core.budget.model_geometry import ModelGeometry

CHUNK_STEP = 32
"""Chunks are whole multiples of this many tokens (the smallest chunk too)."""
CHUNK_SHARE = 0.5
"""Share of the room outside the KV limit that one chunk's buffers may use."""
# Per token and layer the forward pass holds about: the residual, the normed input
# and the attention output (hidden each), queries, keys and values, and the MLP's
# gate, up and product (intermediate each).
_HIDDEN_COPIES = 3
_MLP_COPIES = 3


def activation_bytes_per_token(
    geometry: ModelGeometry, hidden: int, intermediate: int, act_bytes: int
) -> int:
    """Transient bytes one prompt token adds to a chunk's forward pass.

    Args:
        geometry: The model.
        hidden: Hidden size.
        intermediate: MLP intermediate size (the largest, for mixtures of experts).
        act_bytes: Activation dtype width at run time.

    Returns:
        Bytes per token (one layer's buffers: MLX frees a layer's once the next
        layer has read them, so they do not add up over layers).
    """
    qkv = (geometry.num_attention_heads + 2 * geometry.kv_heads) * geometry.head_dim
    elements = _HIDDEN_COPIES * hidden + qkv + _MLP_COPIES * intermediate
    return elements * act_bytes


def chunk_bytes(
    geometry: ModelGeometry,
    chunk: int,
    context: int,
    per_token: int,
    act_bytes: int,
) -> int:
    """Transient bytes of prefilling ``chunk`` tokens on top of ``context`` cached ones.

    An upper bound: the attention scores are counted whole, as MLX's own attention
    materializes them (the CPU backend's attention splits them into smaller blocks).
    """
    scores = prefill_scores_bytes(geometry, chunk, context + chunk, act_bytes)
    return chunk * per_token + scores


def chunk_allowance(
    total_memory: int, weights_bytes: int, fixed_kv: int, settings: BudgetSettings
) -> int:
    """Bytes one prefill chunk's buffers may take: `CHUNK_SHARE` of the room the
    safety factor keeps outside the KV cache's limit."""
    room = memory_budget_bytes(total_memory, settings) - weights_bytes - fixed_kv
    return int(max(0, room) * (1 - settings.safety_factor) * CHUNK_SHARE)


def largest_chunk(
    geometry: ModelGeometry,
    context: int,
    allowance: int,
    per_token: int,
    act_bytes: int,
    ceiling: int,
) -> int:
    """The largest chunk (a multiple of `CHUNK_STEP`, at most ``ceiling``) that fits.

    Args:
        geometry: The model.
        context: Tokens already in the cache (the chunk attends to them too).
        allowance: Bytes the chunk may take (`chunk_allowance`).
        per_token: `activation_bytes_per_token`.
        act_bytes: Activation dtype width.
        ceiling: The largest chunk worth taking (at least `CHUNK_STEP`).

    Returns:
        Tokens; `CHUNK_STEP` when not even that fits (a prompt still has to go in:
        the request checks refuse what cannot fit at all before this is asked).
    """
    if ceiling < CHUNK_STEP:
        raise ValueError(f"ceiling must be >= {CHUNK_STEP}, got {ceiling}")
    best = CHUNK_STEP
    low, high = 1, ceiling // CHUNK_STEP
    # chunk_bytes grows with the chunk: bisect over multiples of the step.
    while low <= high:
        middle = (low + high) // 2
        size = middle * CHUNK_STEP
        if chunk_bytes(geometry, size, context, per_token, act_bytes) <= allowance:
            best = size
            low = middle + 1
        else:
            high = middle - 1
    return best
