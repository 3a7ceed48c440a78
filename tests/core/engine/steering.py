"""Test-only steering: make a random-weight model open a tool call, then stop.

A model with random weights never decides to call a tool. `steer_calls` wraps the
engine's own call processor (`tool_hooks.call_processor`) so that the model's first
reply token gets a large bonus on the start marker and the token after an end marker a
large bonus on end-of-sequence; what the model writes in between is its own (random)
choice under whatever the engine constrains — which is what the tests check.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from app.core.engine import tool_hooks

BONUS = 1e4


class Steer:
    """A logits processor: the bonuses first, then the engine's processor (if any)."""

    def __init__(self, inner, start_id: int, end_id: int, eos_id: int):
        self.inner = inner
        self.start_id, self.end_id, self.eos_id = start_id, end_id, eos_id
        self.steps = 0

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        bonus = np.zeros(logits.shape[-1], dtype=np.float32)
        if self.steps == 0:
            bonus[self.start_id] = BONUS
        elif int(tokens[-1].item()) == self.end_id:
            bonus[self.eos_id] = BONUS
        self.steps += 1
        logits = logits + mx.array(bonus).astype(logits.dtype)
        return self.inner(tokens, logits) if self.inner is not None else logits


def steer_calls(monkeypatch, start_id: int, end_id: int, eos_id: int, *, lazy=True):
    """Steer every turn with tools on this engine (``lazy=False``: without the
    engine's lazy call grammar, the control)."""
    real = tool_hooks.call_processor

    def steered(tokenizer, turn, *args, **kwargs):
        inner = real(tokenizer, turn, *args, **kwargs) if lazy else None
        return Steer(inner, start_id, end_id, eos_id)

    monkeypatch.setattr(tool_hooks, "call_processor", steered)
