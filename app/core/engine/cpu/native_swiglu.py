"""mlx-lm's SwiGLU activation through the native kernel on the CPU backend.

Gated MLPs (Llama, Qwen, Mistral and most mlx-lm models) compute ``silu(gate) * up``
with ``mlx_lm.models.activations.swiglu``. MLX's x86 CPU build computes exp one element
at a time: on the qwen05 shape that took 20 ms per layer for a 256-token prefill chunk,
about a sixth of the prefill (docs/native-kernel.md, "What bounds prefill"). The
kernel's ``swiglu`` (``native/swiglu.cpp``) computes it with a vectorized exp: relative
error 2e-7 against float64 (MLX's own: 9e-7), ~18x faster.

Model modules import ``swiglu`` by name, so `install` replaces it in every mlx-lm model
module, as `cpu_attention` does for attention, once a self-test against MLX's own
passes; `uninstall` gives them theirs back. `backend.adapt_model` installs it on the CPU
backend wherever the kernel is built and not switched off, whatever the model's weights.
"""

from __future__ import annotations

import sys
from typing import cast

import mlx.core as mx

from app.core.engine.cpu import native_build, native_kernel

TOLERANCE = 1e-5
"""Self-test bound on ``|kernel - MLX|`` relative to the largest output."""


def _mlx_lm_activations():
    from mlx_lm.models import activations

    return activations


_MLX_SWIGLU = _mlx_lm_activations().swiglu


def swiglu(gate: mx.array, x: mx.array) -> mx.array:
    """``silu(gate) * x`` through the kernel (MLX's own for shapes that broadcast)."""
    module = native_kernel.load_module()
    if module is None or gate.shape != x.shape:
        return _MLX_SWIGLU(gate, x)
    return cast(mx.array, _differentiable(gate, x))


@mx.custom_function
def _differentiable(gate: mx.array, x: mx.array) -> mx.array:
    # The kernel's primitive has no gradient of its own; training in a process whose
    # engine installed it (the model kit's, the tests') takes the one below.
    module = native_kernel.load_module()
    assert module is not None  # `swiglu` checked it
    return module.swiglu(gate, x)


@_differentiable.vjp
def _gradient(primals, cotangent, output):
    """d/dgate = x·σ(g)·(1 + g·(1 − σ(g))), d/dx = silu(g), in MLX's own ops."""
    gate, x = primals
    sigmoid = mx.sigmoid(gate)
    return (
        cotangent * x * sigmoid * (1 + gate * (1 - sigmoid)),
        cotangent * gate * sigmoid,
    )


def self_test(seed: int = 0) -> str | None:
    """Compare the kernel's SwiGLU with mlx-lm's on random gates up to +-100.

    Returns None when they agree, else what differs (one line).
    """
    module = native_kernel.load_module()
    if module is None:
        return "the native kernel is not built"
    key = mx.random.key(seed)
    gate = 30.0 * mx.random.normal((5, 1003), key=key)
    extremes = mx.array([[-100.0, -88.0, 0.0, 88.0, 100.0] * 2])
    gate = mx.concatenate([gate, mx.broadcast_to(extremes, (5, 10))], axis=1)
    up = mx.random.normal(gate.shape, key=mx.random.split(key)[1])
    expected = _MLX_SWIGLU(gate, up)
    got = module.swiglu(gate, up)
    error = float(mx.abs(got - expected).max())
    scale = float(mx.abs(expected).max())
    if got.shape != expected.shape or not error <= TOLERANCE * scale:
        return f"swiglu: error {error:.3g} against mlx-lm's (scale {scale:.3g})"
    return None


def install() -> str:
    """Route mlx-lm's SwiGLU through the kernel if it is usable.

    Returns:
        One line: used, or why not (then mlx-lm's own is in place).
    """
    if native_build.disabled():
        uninstall()
        return f"switched off ({native_build.DISABLE_ENV}=0)"
    try:
        failed = self_test()
    except Exception as exc:  # a stale build without the op, or another MLX
        failed = f"unusable ({type(exc).__name__}: {exc})"
    if failed is not None:
        uninstall()
        return failed
    activations = _mlx_lm_activations()
    activations.swiglu = swiglu
    _replace(_MLX_SWIGLU, swiglu)
    return "used (self-test passed)"


def uninstall() -> None:
    """Give every mlx-lm module its own SwiGLU back."""
    _mlx_lm_activations().swiglu = _MLX_SWIGLU
    _replace(swiglu, _MLX_SWIGLU)


def installed() -> bool:
    """True when mlx-lm's activations module routes SwiGLU through the kernel."""
    return _mlx_lm_activations().swiglu is swiglu


def _replace(old, new) -> None:
    # Model modules imported later take the name from activations, now replaced.
    for name, module in list(sys.modules.items()):
        if not name.startswith("mlx_lm.models.") or module is None:
            continue
        if vars(module).get("swiglu") is old:
            vars(module)["swiglu"] = new
