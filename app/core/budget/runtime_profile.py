"""How the engine will hold a model on this platform, known without importing MLX.

The doctor judges a model from its folder alone, before anything is loaded, so it
cannot ask MLX which backend it has. Apple Silicon Macs run MLX on Metal (weights stay
as stored, activations and KV cache in the model's dtype); everywhere else the CPU
backend is used, where the engine computes in float32 but stores the KV cache in 16
bits (`app.core.engine.cache.kv_storage`), and quantized weights either stay packed, served
by the native kernel (`app.core.engine.cpu.native_kernel`), or are dequantized to
float32 (see `app.core.engine.cpu.backend`).

Whether the kernel will serve a model is decided here the way the engine decides it:
the kernel is built (or bundled) and not switched off (`native_build.available`, which
imports no MLX), and every quantized layer of the model is affine 4- or 8-bit with a
group of 32, 64 or 128 (config.json's ``quantization``, per-layer entries included);
otherwise the engine dequantizes the whole model, and so does the estimate. The
kernel's self-test still runs at load; if it fails the engine falls back to float32,
and the loaded model's measured bytes (`ModelInfo.weights_bytes`) replace the estimate.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from app.core.budget.weights import cpu_resident_bytes, read_weights
from app.core.engine.cpu import native_build

PACKED = "packed"
"""Weights layout: quantized layers stay packed (the native kernel serves them)."""
DENSE = "float32"
"""Weights layout: quantized layers are dequantized, floats upcast to float32."""
AS_STORED = "as stored"
"""Weights layout on Metal: every tensor as the file holds it."""


@dataclass(frozen=True)
class RuntimeProfile:
    """The engine's layout on this platform.

    Attributes:
        backend: ``metal`` or ``cpu``.
        act_dtype_bytes: Width of activations and recurrent state (None: the model's).
        dense_weights: Whether floats are upcast to float32 and quantized weights are
            dequantized after loading, unless the native kernel serves them (the CPU
            backend).
        native_kernel: Whether the native kernel is built and switched on, so the
            quantized layers it covers stay packed.
        kv_dtype_bytes: Width of unquantized KV elements and of a quantized cache's
            scales and biases (None: the model's).
    """

    backend: str
    act_dtype_bytes: int | None
    dense_weights: bool
    native_kernel: bool = False
    kv_dtype_bytes: int | None = None


def runtime_profile() -> RuntimeProfile:
    """Return the profile of this machine, guessed from the platform (no MLX import)."""
    metal = sys.platform == "darwin" and platform.machine() == "arm64"
    return profile_for_backend(metal, native_kernel=not metal and kernel_available())


def kernel_available() -> bool:
    """Whether the native kernel is built (or bundled) and not switched off."""
    return native_build.available()


def profile_for_backend(metal: bool, *, native_kernel: bool = False) -> RuntimeProfile:
    """Return the profile of the Metal backend or of the CPU backend.

    Args:
        metal: MLX runs on Metal.
        native_kernel: On the CPU backend, the native kernel is available.
    """
    if metal:
        return RuntimeProfile(
            backend="metal", act_dtype_bytes=None, dense_weights=False
        )
    return RuntimeProfile(
        backend="cpu",
        act_dtype_bytes=4,
        dense_weights=True,
        native_kernel=native_kernel,
        kv_dtype_bytes=2,
    )


def quantization_of(config: Mapping) -> dict:
    """config.json's quantization block (mlx-lm's key, else Hugging Face's), or {}."""
    block = config.get("quantization") or config.get("quantization_config") or {}
    return block if isinstance(block, dict) else {}


def layer_bits(quantization: Mapping, layer: str) -> int | None:
    """Bits of one layer's packed weights: its own entry, else the model's."""
    entry = quantization.get(layer)
    bits = entry.get("bits") if isinstance(entry, dict) else None
    bits = bits if bits is not None else quantization.get("bits")
    return bits if isinstance(bits, int) and bits > 0 else None


def kernel_gap(quantization: Mapping) -> str | None:
    """Why the native kernel cannot serve a model so quantized, or None if it can.

    Mirrors `native_kernel.unsupported_reason`: every quantized layer must be affine
    with a (bits, group) the kernel computes. Per-layer entries (mixed quantization)
    count one by one; a layer left unquantized (``false``) needs nothing.
    """
    default_mode = quantization.get("mode", "affine")
    layers: list[tuple[str, Mapping]] = [("the model", quantization)]
    layers += [
        (name, entry) for name, entry in quantization.items() if isinstance(entry, dict)
    ]
    for name, entry in layers:
        mode = entry.get("mode", default_mode)
        bits = entry.get("bits", quantization.get("bits"))
        group = entry.get("group_size", quantization.get("group_size"))
        if mode != "affine":
            return f"{name} uses {mode} quantization (the kernel is affine only)"
        if (bits, group) not in native_build.SUPPORTED:
            return (
                f"{name} is {bits}-bit, group {group} "
                "(the kernel serves 4/8-bit, groups 32/64/128)"
            )
    return None


def weights_layout(config: Mapping, profile: RuntimeProfile) -> str:
    """How the engine will hold this model's weights: `PACKED`, `DENSE` or `AS_STORED`."""
    if not profile.dense_weights:
        return AS_STORED
    quantization = quantization_of(config)
    if profile.native_kernel and quantization and kernel_gap(quantization) is None:
        return PACKED
    return DENSE


def resident_weights_bytes(
    model_dir: Path, config: dict, profile: RuntimeProfile
) -> int:
    """Bytes the model's weights will occupy once the engine has loaded them.

    On the CPU backend: packed words as stored plus float32 scales and biases when the
    native kernel will serve every quantized layer, else everything dequantized to
    float32; all other floats at float32 either way.
    """
    layout = weights_layout(config, profile)
    if layout == AS_STORED:
        return read_weights(model_dir).tensor_bytes
    quantization = quantization_of(config)
    return cpu_resident_bytes(
        model_dir,
        profile.act_dtype_bytes or 4,
        packed=layout == PACKED,
        layer_bits=lambda layer: layer_bits(quantization, layer),
    )
