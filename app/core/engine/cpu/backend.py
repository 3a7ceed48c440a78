"""Backend decisions in one place: what dtype and weight layout is fast on this device.

On Apple Silicon (Metal) quantized weights with fp16/bf16 activations are the fast path.
On the CPU backend the opposite holds (shared/NOTES-mlx.md): quantized matmuls with
fp16/bf16 activations are 10–40× slower than fp32, and dense fp32 matmuls use BLAS. So on
CPU, quantized layers are dequantized and every parameter is upcast to float32 after
loading, and attention (plain and quantized KV) goes through `cpu_attention`, whose
exponential and GQA layout suit this backend; Metal keeps mlx-lm's fused kernels.

The KV cache is the other exception: it stores keys and values in 16 bits (`kv_storage`,
llama.cpp's size) and attention widens them as it reads.

The exception on CPU: when the native quantized kernel is built and passes its self-test
on the loaded layers (`native_kernel`), affine 4/8-bit layers stay packed and decode
reads them directly, at a quarter (4-bit) of float32's resident bytes.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from app.core.engine.cpu.native_kernel import KernelState

_kernel_state = KernelState(False, "no model adapted yet")


def uses_metal() -> bool:
    """Return True when MLX runs on the GPU through Metal."""
    try:
        return bool(mx.metal.is_available())
    except Exception:  # older MLX builds without the metal module
        return False


def backend_name() -> str:
    """Return a short name of the active backend for reports."""
    return "metal" if uses_metal() else "cpu"


def adapt_model(model: nn.Module, *, native: bool = True) -> nn.Module:
    """Convert a freshly loaded model to the fast layout of this backend.

    Args:
        model: A model as ``mlx_lm`` loaded it.
        native: Try the native quantized kernel (False: today's float32 path; the
            benchmark compares both).

    Returns:
        The same model on Metal; on CPU a model with float32 parameters, its quantized
        layers either served by the native kernel or dequantized.
    """
    global _kernel_state
    if uses_metal():
        return model
    from mlx_lm.utils import dequantize_model

    from app.core.engine.cache import kv_storage
    from app.core.engine.cpu import (
        cpu_attention,
        decode_block,
        kv_kernel,
        native_kernel,
        native_swiglu,
    )

    cpu_attention.install()
    # Process-wide, whatever the weights: MLX's scalar exp made the gated MLP's
    # activation a sixth of a prefill (native_swiglu).
    native_swiglu.install()
    # Keys and values in 16 bits, computed in float32: float16 where the native kernel
    # widens them in registers, bfloat16 (a shift, ~10x cheaper for MLX) otherwise.
    kv_kernel.state.cache_clear()  # the switch or the build may have changed
    kv_storage.install(mx.float16 if kv_kernel.used() else mx.bfloat16)

    # Floating parameters only: packed words stay uint32. Before dequantizing, so the
    # widened weights are q * scale + bias exactly: at the file's bfloat16 scales they
    # were rounded to bfloat16 (logits 1 % off the quantized model's on a test model).
    model.set_dtype(mx.float32)
    if native:
        _kernel_state = native_kernel.install(model)
        if _kernel_state.used:
            # One-token calls of Llama/Qwen2-style blocks in 3 graph nodes, not ~160.
            decode_block.install(model)
    else:
        _kernel_state = KernelState(False, "not requested")
    if not _kernel_state.used and any(
        isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding)
        for _, m in model.named_modules()
    ):
        model = dequantize_model(model)
    mx.eval(model.parameters())
    return model


def kernel_state() -> KernelState:
    """Whether the last adapted model uses the native quantized kernel, and why."""
    return _kernel_state


def kv_dtype_name(model: nn.Module) -> str:
    """The float dtype the model's KV cache stores (and a quantized cache's scales)."""
    from app.core.engine.cache import kv_storage

    stored = kv_storage.storage_dtype()
    if stored is not None and activation_dtype_name(model) == "float32":
        return str(stored).removeprefix("mlx.core.")
    return activation_dtype_name(model)


def parameter_bytes(model: nn.Module) -> int:
    """Return the bytes held by the model's parameters."""
    flat = tree_flatten(model.parameters())
    assert isinstance(flat, list), "tree_flatten returns a dict only into a dict"
    return sum(v.nbytes for _, v in flat)


def activation_dtype_name(model: nn.Module) -> str:
    """Return the dtype of the model's first floating-point parameter."""
    flat = tree_flatten(model.parameters())
    assert isinstance(flat, list), "tree_flatten returns a dict only into a dict"
    for _, value in flat:
        if mx.issubdtype(value.dtype, mx.floating):
            return str(value.dtype).removeprefix("mlx.core.")
    return "float32"
