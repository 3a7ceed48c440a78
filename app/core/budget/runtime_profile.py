"""How the engine will hold a model on this platform, known without importing MLX.

The doctor judges a model from its folder alone, before anything is loaded, so it
cannot ask MLX which backend it has. Apple Silicon Macs run MLX on Metal (weights stay
as stored, activations and KV cache in the model's dtype); everywhere else the CPU
backend is used, where the engine computes in float32 but stores the KV cache in 16
bits (see `app.core.engine.cpu.backend` and `app.core.engine.cache.kv_storage`).
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass
from pathlib import Path

from app.core.budget.weights import dense_resident_bytes, read_weights


@dataclass(frozen=True)
class RuntimeProfile:
    """The engine's layout on this platform.

    Attributes:
        backend: ``metal`` or ``cpu``.
        act_dtype_bytes: Width of activations and recurrent state (None: the model's).
        dense_weights: Whether quantized weights are dequantized after loading.
        kv_dtype_bytes: Width of unquantized KV elements and of a quantized cache's
            scales and biases (None: the model's).
    """

    backend: str
    act_dtype_bytes: int | None
    dense_weights: bool
    kv_dtype_bytes: int | None = None


def runtime_profile() -> RuntimeProfile:
    """Return the profile of this machine, guessed from the platform (no MLX import)."""
    return profile_for_backend(
        sys.platform == "darwin" and platform.machine() == "arm64"
    )


def profile_for_backend(metal: bool) -> RuntimeProfile:
    """Return the profile of the Metal backend or of the CPU backend."""
    if metal:
        return RuntimeProfile(
            backend="metal", act_dtype_bytes=None, dense_weights=False
        )
    return RuntimeProfile(
        backend="cpu", act_dtype_bytes=4, dense_weights=True, kv_dtype_bytes=2
    )


def resident_weights_bytes(
    model_dir: Path, config: dict, profile: RuntimeProfile
) -> int:
    """Bytes the model's weights will occupy once the engine has loaded them."""
    if not profile.dense_weights:
        return read_weights(model_dir).tensor_bytes
    quantization = config.get("quantization") or {}
    bits = quantization.get("bits") if isinstance(quantization, dict) else None
    return dense_resident_bytes(model_dir, bits, profile.act_dtype_bytes or 4)
