"""The budget's estimate of resident weights against the bytes a loaded model holds.

`runtime_profile.resident_weights_bytes` reads only config.json and the safetensors
headers; here real models (uniform 4/8-bit, mixed 4/8-bit, mixed with a 3-bit layer the
kernel does not cover, unquantized) are loaded by the engine and their parameter bytes
must equal the estimate, with the native kernel and without it. A failed self-test
leaves float32 weights: then the measured bytes decide the budget. Skipped where the
kernel cannot be built, or on Metal.
"""

from __future__ import annotations

import contextlib
import io
import shutil

import mlx.core as mx
import pytest

from app.core.budget.model_config import load_config
from app.core.budget.runtime_profile import (
    DENSE,
    PACKED,
    resident_weights_bytes,
    runtime_profile,
    weights_layout,
)
from app.core.engine import memory_guard
from app.core.engine.cpu import backend, native_build, native_kernel
from app.core.engine.loader import load_model_folder
from app.core.errors import BudgetError

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)


@pytest.fixture(scope="module")
def kernel(native_built):
    return native_built


def _quantized_copy(source, folder, predicate, bits=4):
    """``source`` (a bfloat16 model folder) quantized with a per-layer predicate."""
    from mlx_lm.utils import load_model, quantize_model, save_config, save_model

    model, config = load_model(source, lazy=False)
    with contextlib.redirect_stdout(io.StringIO()):
        model, config = quantize_model(
            model, config, 64, bits, quant_predicate=predicate
        )
    folder.mkdir()
    save_model(folder, model)
    save_config(config, folder / "config.json")
    for path in source.iterdir():
        if path.name.startswith("tokenizer"):
            shutil.copy(path, folder / path.name)
    return folder


def _mixed(bits_of_down_proj):
    def predicate(path, module):
        if path.endswith("mlp.down_proj"):
            return {"group_size": 64, "bits": bits_of_down_proj, "mode": "affine"}
        return True

    return predicate


@pytest.fixture(scope="module")
def models(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("estimate")
    return {
        "16-bit": tiny_model_dir,
        "4-bit": _quantized_copy(tiny_model_dir, root / "q4", None, 4),
        "8-bit": _quantized_copy(tiny_model_dir, root / "q8", None, 8),
        "mixed 4/8": _quantized_copy(tiny_model_dir, root / "q48", _mixed(8)),
        "mixed 4/3": _quantized_copy(tiny_model_dir, root / "q43", _mixed(3)),
    }


def _measured(folder) -> tuple[int, int]:
    """The loaded model's parameter bytes and MLX's active bytes it added."""
    mx.clear_cache()
    before = mx.get_active_memory()
    loaded = load_model_folder(folder)
    mx.clear_cache()
    return loaded.info.weights_bytes, mx.get_active_memory() - before


@pytest.mark.parametrize("kernel_on", [True, False], ids=["kernel", "no-kernel"])
@pytest.mark.parametrize("name", ["16-bit", "4-bit", "8-bit", "mixed 4/8", "mixed 4/3"])
def test_the_estimate_is_what_the_loaded_model_holds(
    kernel, models, monkeypatch, name, kernel_on
):
    if not kernel_on:
        monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    folder = models[name]
    config = load_config(folder)
    profile = runtime_profile()
    assert profile.native_kernel == kernel_on
    estimate = resident_weights_bytes(folder, config, profile)
    measured, active = _measured(folder)
    assert estimate == measured
    # MLX's own count of the new allocations agrees to a few small buffers.
    assert abs(active - measured) <= 0.05 * measured
    packed = kernel_on and name in {"4-bit", "8-bit", "mixed 4/8"}
    assert weights_layout(config, profile) == (PACKED if packed else DENSE)
    assert backend.kernel_state().used == packed, backend.kernel_state().reason


def test_packed_weights_cost_their_quantized_size(kernel, models):
    profile = runtime_profile()
    dense = resident_weights_bytes(
        models["16-bit"], load_config(models["16-bit"]), profile
    )
    four = resident_weights_bytes(
        models["4-bit"], load_config(models["4-bit"]), profile
    )
    eight = resident_weights_bytes(
        models["8-bit"], load_config(models["8-bit"]), profile
    )
    # The tiny shape's norms are float32 at every width; the matrices shrink.
    assert four < eight < dense / 2


def test_after_a_failed_self_test_the_measured_bytes_decide(
    kernel, models, monkeypatch
):
    folder = models["4-bit"]
    estimate = resident_weights_bytes(folder, load_config(folder), runtime_profile())
    monkeypatch.setattr(native_kernel, "TOLERANCE", -1.0)
    loaded = load_model_folder(folder)
    assert backend.kernel_state().reason.startswith("self-test failed")
    assert loaded.info.weights_bytes > 2 * estimate
    # A machine whose budget holds the packed estimate but not the float32 weights.
    settings = memory_guard.BudgetSettings()
    room = (estimate + loaded.info.weights_bytes) // 2
    total = int((room + settings.reserve_bytes) / settings.memory_cap_fraction)
    assert memory_guard.memory_budget_bytes(total, settings) >= estimate
    monkeypatch.setattr(memory_guard, "total_memory", lambda: total)
    with pytest.raises(BudgetError, match="weights need"):
        memory_guard.device_budget(loaded.info, settings)
