"""How the engine will hold a model on this platform, known without importing MLX.

The doctor judges a model from its folder alone, before anything is loaded, so it
cannot ask MLX which backend it has. Apple Silicon Macs run MLX on Metal (weights stay
as stored, activations in the model's dtype); everywhere else the CPU backend is used,
where the engine dequantizes weights and computes in float32 (see
`app.core.engine.cpu.backend`).
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
        act_dtype_bytes: Width of activations and unquantized KV (None: the model's).
        dense_weights: Whether quantized weights are dequantized after loading.
    """

    backend: str
    act_dtype_bytes: int | None
    dense_weights: bool


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
    return RuntimeProfile(backend="cpu", act_dtype_bytes=4, dense_weights=True)


def resident_weights_bytes(
    model_dir: Path, config: dict, profile: RuntimeProfile
) -> int:
    """Bytes the model's weights will occupy once the engine has loaded them."""
    if not profile.dense_weights:
        return read_weights(model_dir).tensor_bytes
    quantization = config.get("quantization") or {}
    bits = quantization.get("bits") if isinstance(quantization, dict) else None
    return dense_resident_bytes(model_dir, bits, profile.act_dtype_bytes or 4)
