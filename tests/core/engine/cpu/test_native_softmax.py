"""The native softmax pass of decode attention against `cpu_attention.softmax_weights`.

Skipped, with the reason, where the native kernel cannot be built or on Metal.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from app.core.engine.cpu import backend, cpu_attention, kv_kernel, native_kernel

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)


@pytest.fixture
def kernel(native_built):
    kv_kernel.state.cache_clear()  # an earlier test may have switched the build off
    module = native_kernel.load_module()
    yield module
    module.force_path("auto")


def _scores(rng, keys: int) -> mx.array:
    scores = rng.standard_normal((1, 2, 7, keys)).astype(np.float32) * 8
    scores[:, :, 3, : keys // 2] = -1e30  # masked, as `_masked_scores` writes them
    return mx.array(scores)


def _close(got: tuple, expected: tuple) -> None:
    weights, sums = got
    assert weights.shape == expected[0].shape and sums.shape == expected[1].shape
    # Weights are at most 1; five squarings turn float32 rounding into ~2e-6.
    assert float(mx.abs(weights - expected[0]).max()) <= 1e-5
    assert float(mx.abs(sums / expected[1] - 1).max()) <= 1e-5


@pytest.mark.parametrize("path", ["auto", "scalar"])
@pytest.mark.parametrize("keys", [1, 5, 8, 257, 4096])
def test_the_native_pass_equals_the_mlx_ops(kernel, path, keys):
    kernel.force_path(path)
    scores = _scores(np.random.default_rng(keys), keys)
    _close(kernel.softmax_weights(scores), cpu_attention.softmax_weights(scores))


def test_a_strided_view_is_read_through_its_strides(kernel):
    scores = _scores(np.random.default_rng(2), 96)
    view = scores.swapaxes(-1, -2)  # (1, 2, 96, 7): rows with stride 96
    _close(kernel.softmax_weights(view), cpu_attention.softmax_weights(view))


def test_decode_attention_takes_it_with_the_kv_kernel(kernel):
    assert kv_kernel.used()
    scores = _scores(np.random.default_rng(3), 64)
    got = kv_kernel.softmax(scores)
    assert got is not None
    _close(got, cpu_attention.softmax_weights(scores))
    kv_kernel.switch(False)
    try:
        assert kv_kernel.softmax(scores) is None
    finally:
        kv_kernel.switch(True)
    assert kv_kernel.softmax(scores.astype(mx.float16)) is None


def test_the_decode_block_switch_keeps_mlx_softmax(kernel, monkeypatch):
    from app.core.engine.cpu import decode_block

    monkeypatch.setenv(decode_block.DISABLE_ENV, "0")
    assert kv_kernel.softmax(_scores(np.random.default_rng(4), 16)) is None


def test_bad_scores_are_refused_in_words(kernel):
    with pytest.raises(ValueError, match="float32"):
        kernel.softmax_weights(mx.zeros((2, 3), dtype=mx.float16))


def test_prefill_attention_takes_it_and_equals_the_mlx_ops(kernel, monkeypatch):
    rng = np.random.default_rng(5)
    q, k, v = (
        mx.array(rng.standard_normal(shape).astype(np.float32))
        for shape in ((1, 4, 40, 16), (1, 2, 90, 16), (1, 2, 90, 16))
    )
    calls = []
    native = kv_kernel.softmax
    monkeypatch.setattr(
        kv_kernel,
        "softmax",
        lambda scores: calls.append(scores.shape) or native(scores),
    )
    got = cpu_attention.attention(q, k, v, 0.25, "causal")
    assert calls and calls[0][-1] == 90  # a causal 40-query chunk over 90 keys
    kv_kernel.switch(False)
    try:
        expected = cpu_attention.attention(q, k, v, 0.25, "causal")
    finally:
        kv_kernel.switch(True)
    assert float(mx.abs(got - expected).max()) <= 1e-5


def test_training_through_it_takes_the_gradient_of_the_mlx_ops(kernel):
    # The model kit trains with the engine's attention installed: the native pass has
    # no gradient of its own, so it carries the MLX ops' gradient.
    scores = _scores(np.random.default_rng(6), 32)
    values = mx.array(
        np.random.default_rng(7).standard_normal((1, 2, 32, 4)), mx.float32
    )

    def loss(softmax):
        def of(s):
            weights, sums = softmax(s)
            return ((weights @ values) / sums).sum() + weights.sum()

        return of

    got = mx.grad(loss(kv_kernel.softmax))(scores)
    expected = mx.grad(loss(cpu_attention.softmax_weights))(scores)
    assert float(mx.abs(got - expected).max()) <= 1e-5
    assert float(mx.abs(expected).max()) > 0.01  # a gradient worth comparing
