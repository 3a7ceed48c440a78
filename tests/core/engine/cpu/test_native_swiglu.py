"""The kernel's SwiGLU against mlx-lm's, on every SIMD path, and its routing.

Skipped, with the reason, where the kernel cannot be built or on Metal.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from app.core.engine.cpu import backend, native_build, native_swiglu

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)

PATHS = ["avx512", "avx2", "scalar"]


def _reference(gate: mx.array, up: mx.array) -> np.ndarray:
    g = np.asarray(gate, dtype=np.float64)
    return g * np.asarray(up, dtype=np.float64) / (1.0 + np.exp(-g))


@pytest.mark.parametrize("path", PATHS)
def test_swiglu_matches_float64_closer_than_mlx_does(kernel, path):
    # Gates across exp's range and past it (+-100: e^-gate is clamped, not inf), and
    # lengths that leave a tail after the last full register.
    if path not in kernel.simd_paths():
        pytest.skip(f"this CPU has no {path} path")
    rng = np.random.default_rng(PATHS.index(path))
    kernel.force_path(path)
    try:
        for length in (1, 15, 17, 1000, 4864):
            gate = mx.array((rng.standard_normal((3, length)) * 20).astype(np.float32))
            gate[0, :5] = mx.array([-100.0, -88.0, 0.0, 88.0, 100.0][: min(5, length)])
            up = mx.array(rng.standard_normal((3, length)).astype(np.float32))
            got = np.asarray(kernel.swiglu(gate, up), dtype=np.float64)
            exact = _reference(gate, up)
            mlx = np.asarray(native_swiglu._MLX_SWIGLU(gate, up), dtype=np.float64)
            assert not np.isnan(got).any()
            big = np.abs(exact) > 1e-30
            error = np.abs(got - exact)[big] / np.abs(exact)[big]
            mlx_error = np.abs(mlx - exact)[big] / np.abs(exact)[big]
            assert error.max() <= max(4 * mlx_error.max(), 1e-6), length
            assert np.abs(got - exact)[~big].max(initial=0.0) < 1e-30
    finally:
        kernel.force_path("auto")


def test_dtype_follows_the_gate_and_threads_give_the_same_result(kernel):
    rng = np.random.default_rng(3)
    gate = mx.array(rng.standard_normal((300, 1000)).astype(np.float32))
    up = mx.array(rng.standard_normal((300, 1000)).astype(np.float32))
    one = kernel.swiglu(gate, up)
    mx.eval(one)
    try:
        kernel.set_threads(2)
        assert mx.array_equal(one, kernel.swiglu(gate, up)).item()
    finally:
        kernel.set_threads(1)
    half = kernel.swiglu(gate.astype(mx.float16), up.astype(mx.float16))
    assert half.dtype == mx.float16
    with pytest.raises(ValueError, match="same shape"):
        kernel.swiglu(gate, up[:10])


def test_install_routes_mlx_lm_models_and_uninstall_restores(kernel, monkeypatch):
    from mlx_lm.models import activations, llama, qwen2

    try:
        assert native_swiglu.install() == "used (self-test passed)"
        assert native_swiglu.installed()
        assert qwen2.swiglu is native_swiglu.swiglu
        assert llama.swiglu is native_swiglu.swiglu
        native_swiglu.uninstall()
        assert qwen2.swiglu is native_swiglu._MLX_SWIGLU
        assert activations.swiglu is native_swiglu._MLX_SWIGLU
        monkeypatch.setenv(native_build.DISABLE_ENV, "0")
        assert native_swiglu.install().startswith("switched off")
        assert not native_swiglu.installed()
        monkeypatch.delenv(native_build.DISABLE_ENV)
        monkeypatch.setattr(native_swiglu, "TOLERANCE", -1.0)
        assert native_swiglu.install().startswith("swiglu: error")
        assert not native_swiglu.installed()
    finally:
        native_swiglu.uninstall()


def test_broadcasting_shapes_keep_mlx_lm_s_own(kernel):
    gate = mx.ones((2, 8))
    up = mx.ones((1, 8))
    assert mx.allclose(
        native_swiglu.swiglu(gate, up), native_swiglu._MLX_SWIGLU(gate, up)
    )


def test_the_engine_installs_it_on_the_cpu(kernel, tmp_path):
    from app.core.engine.loader import load_model_folder
    from app.core.modelkit.model_builder import build_model

    folder = tmp_path / "tiny"
    build_model(folder, shape="tiny", bits=4, seed=1, arch="qwen2")
    try:
        load_model_folder(folder)
        assert native_swiglu.installed()
    finally:
        native_swiglu.uninstall()


def test_gradients_through_the_installed_swiglu_are_mlx_lm_s(kernel):
    # Training in a process whose engine installed the kernel's SwiGLU (the model
    # kit's, the test suite's) differentiates through it: the primitive has no vjp
    # of its own, the wrapper gives MLX's.
    native_swiglu.install()
    try:
        key = mx.random.key(3)
        gate = 4.0 * mx.random.normal((3, 67), key=key)
        up = mx.random.normal((3, 67), key=mx.random.split(key)[1])

        def loss(activation):
            return lambda g, x: (activation(g, x) ** 2).sum()

        ours = mx.grad(loss(native_swiglu.swiglu), argnums=(0, 1))(gate, up)
        theirs = mx.grad(loss(native_swiglu._MLX_SWIGLU), argnums=(0, 1))(gate, up)
        for a, b in zip(ours, theirs, strict=True):
            assert float(mx.abs(a - b).max()) <= 1e-4 * float(mx.abs(b).max())
    finally:
        native_swiglu.uninstall()
