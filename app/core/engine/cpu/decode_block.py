"""A decode token through a transformer block in three graph nodes, not ~160.

On MLX's CPU backend a decode step of a quantized qwen05-shaped model was ~3,800 graph
nodes (docs/measured.md, "The decode step, taken apart"): RMSNorm and RoPE have no CPU
kernels in MLX 0.32 (``mx.fast`` falls back to composed operations: square, mean,
rsqrt, arange, exp, cos, sin, slices, concatenation...), every quantized product came
with copy nodes around the kernel, and scalars are broadcast nodes. Each node costs MLX
microseconds of scheduling and allocation whatever its size, and for one token the work
inside them is tiny. So for a block of the Llama/Qwen2 family whose projections the
native kernel serves (`native_kernel`), a one-token call runs the two halves around
attention as one native operation each (``native/block.cpp``):

- ``decode_qkv``: input RMSNorm, the q/k/v projections with their biases, RoPE;
- the cache update and attention: unchanged (mlx-lm's cache classes, `cpu_attention`);
- ``decode_mlp``: o projection and residual, RMSNorm, gate/up, SiLU(gate) * up, down
  projection and residual.

Anything else (prefill chunks, batched inputs, other architectures or RoPE variants,
mixed quantization) takes the block's own code. The switch (`switch`) lets the bench
and the tests compare both in one process.
"""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from app.core.engine.cpu import native_build
from app.core.engine.cpu.native_kernel import KernelLinear, load_module

FAMILIES = ("mlx_lm.models.qwen2", "mlx_lm.models.llama")
"""Modules whose ``TransformerBlock``, ``Attention`` and ``MLP`` compute exactly what
the native block does (pre-norm, SwiGLU, plain RoPE)."""

DISABLE_ENV = native_build.DECODE_BLOCK_ENV
"""Set to ``0`` to keep MLX's own operations around the kernels for a decode token: the
blocks' own code and MLX's softmax in decode attention (`kv_kernel.softmax`); a
before/after comparison across processes, as the ``peers`` bench runs them."""
disabled = native_build.decode_block_disabled


_switched_on = True
_ORIGINAL_CALL: dict[type, Any] = {}
_FUSED_CLASS: dict[type, type] = {}


def switch(on: bool) -> None:
    """Let fused blocks take one-token calls (True) or always run their own code."""
    global _switched_on
    _switched_on = on


def switched_on() -> bool:
    """True while fused blocks take one-token calls."""
    return _switched_on


def _projection(layer: nn.Module) -> list[mx.array]:
    arrays = [layer["weight"], layer["scales"], layer["biases"]]
    if "bias" in layer:
        arrays.append(layer["bias"])
    return arrays


def _fused_call(self, x: mx.array, mask=None, cache=None) -> mx.array:
    original = _ORIGINAL_CALL[type(self)]
    if (
        not _switched_on
        or cache is None
        or x.shape[0] * x.shape[1] != 1
        or not isinstance(cache.offset, int)
    ):
        return original(self, x, mask, cache)
    kernel = load_module()
    assert kernel is not None, "blocks are routed only where the kernel loaded"
    attention = self.self_attn
    mlp = self.mlp
    norm = self.input_layernorm
    rope = attention.rope
    group, bits = attention.q_proj.group_size, attention.q_proj.bits
    queries, keys, values = kernel.decode_qkv(
        x,
        norm.weight,
        norm.eps,
        _projection(attention.q_proj),
        _projection(attention.k_proj),
        _projection(attention.v_proj),
        group,
        bits,
        attention.n_heads,
        attention.n_kv_heads,
        rope.dims,
        rope.traditional,
        rope.base,
        rope.scale,
        cache.offset,
    )
    keys, values = cache.update_and_fetch(keys, values)
    # The attention the model's own module calls (`cpu_attention` routes it there).
    attend = sys.modules[type(attention).__module__].scaled_dot_product_attention
    output = attend(
        queries, keys, values, cache=cache, scale=attention.scale, mask=mask
    )
    post = self.post_attention_layernorm
    return kernel.decode_mlp(
        output,
        x,
        _projection(attention.o_proj),
        post.weight,
        post.eps,
        _projection(mlp.gate_proj),
        _projection(mlp.up_proj),
        _projection(mlp.down_proj),
        group,
        bits,
    )


def _fused_class(cls: type) -> type:
    if cls not in _FUSED_CLASS:
        fused = type(cls.__name__, (cls,), {"__call__": _fused_call})
        fused.__module__ = cls.__module__  # the attention lookup reads the family's
        _ORIGINAL_CALL[fused] = cls.__call__
        _FUSED_CLASS[cls] = fused
    return _FUSED_CLASS[cls]


def routed(block: nn.Module) -> bool:
    """True when the block's one-token calls go through the native block."""
    return type(block) in _ORIGINAL_CALL


def unfit_reason(block: nn.Module) -> str | None:
    """Why the native block cannot compute this block's one-token calls, or None."""
    family = type(block).__module__
    if family not in FAMILIES or type(block).__name__ != "TransformerBlock":
        return f"{type(block).__module__}.{type(block).__name__} is not a known family"
    attention = getattr(block, "self_attn", None)
    mlp = getattr(block, "mlp", None)
    if attention is None or mlp is None:
        return "no self_attn / mlp"
    if type(attention).__module__ != family or type(mlp).__module__ != family:
        return "attention or MLP replaced"
    names = ("q_proj", "k_proj", "v_proj", "o_proj")
    found = [getattr(attention, n, None) for n in names] + [
        getattr(mlp, n, None) for n in ("gate_proj", "up_proj", "down_proj")
    ]
    layers = [layer for layer in found if isinstance(layer, KernelLinear)]
    if len(layers) != len(found):
        return "a projection is not served by the native kernel"
    kinds = {(layer.group_size, layer.bits) for layer in layers}
    if len(kinds) != 1:
        return f"mixed quantization {sorted(kinds)}"
    if type(attention.rope) is not nn.RoPE:
        return f"RoPE variant {type(attention.rope).__name__}"
    for norm in (block.input_layernorm, block.post_attention_layernorm):
        if type(norm) is not nn.RMSNorm:
            return f"norm {type(norm).__name__}"
    return None


def install(model: nn.Module) -> int:
    """Route the one-token calls of every fitting block through the native block.

    Call after `native_kernel.install` succeeded. The blocks keep their parameters and
    their own code for everything else (their class becomes a subclass that adds
    the one-token path).

    Returns:
        How many blocks were routed.
    """
    if disabled():
        return 0
    module = load_module()
    if module is None or not hasattr(module, "decode_qkv"):
        return 0
    inner = getattr(model, "model", None)
    blocks = getattr(inner, "layers", None) or getattr(model, "layers", None) or []
    count = 0
    for block in blocks:
        if routed(block):
            count += 1
            continue
        if unfit_reason(block) is None:
            block.__class__ = _fused_class(type(block))
            count += 1
    return count
