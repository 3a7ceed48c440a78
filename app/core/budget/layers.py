"""What one layer keeps in the generation cache, as plain numbers.

A model's cache is a list with one entry per layer, and the entries do not all behave
alike: a full-attention layer keeps keys and values for every token, a sliding-window
layer keeps at most its window, and a recurrent layer (linear attention, SSM, short
convolution) keeps a state whose size does not depend on the context at all. The budget
adds these up layer by layer, so each layer is described by one small frozen value.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# The recurrent state of linear-attention layers is created in float32 by mlx-lm
# whatever the activation dtype, so it is counted apart from the activation-dtype part.
FLOAT32_BYTES = 4


class LayerKind(Enum):
    """How a layer's cache grows with the context."""

    FULL = "full_attention"
    """Keys and values for every token: grows without bound."""
    SLIDING = "sliding_attention"
    """Keys and values for the last ``window`` tokens only."""
    STATE = "constant_state"
    """A fixed-size recurrent state (linear attention, SSM, convolution)."""


@dataclass(frozen=True)
class LayerCache:
    """The cache geometry of one layer.

    Attributes:
        kind: How the cache grows.
        kv_heads: Key/value heads stored (0 for a ``STATE`` layer).
        k_head_dim: Elements per head per token for keys.
        v_head_dim: Elements per head per token for values (differs from the keys in
            multi-head latent attention).
        window: Tokens kept by a ``SLIDING`` layer.
        state_act_elements: Elements of a ``STATE`` layer kept in the activation dtype.
        state_float32_elements: Elements of a ``STATE`` layer kept in float32.
    """

    kind: LayerKind
    kv_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None
    state_act_elements: int = 0
    state_float32_elements: int = 0

    def __post_init__(self):
        if self.kind is LayerKind.SLIDING and not self.window:
            raise ValueError("a sliding-window layer needs a positive window")
        if self.kind is not LayerKind.STATE and self.kv_heads <= 0:
            raise ValueError("an attention layer needs at least one key/value head")

    @property
    def kv_elements_per_token(self) -> int:
        """Key plus value elements stored per token (0 for a ``STATE`` layer)."""
        return self.kv_heads * (self.k_head_dim + self.v_head_dim)

    def state_bytes(self, act_dtype_bytes: int) -> int:
        """Bytes of a ``STATE`` layer's constant state (0 for attention layers).

        Args:
            act_dtype_bytes: Bytes per element of the activation dtype at run time.
        """
        return (
            self.state_act_elements * act_dtype_bytes
            + self.state_float32_elements * FLOAT32_BYTES
        )
