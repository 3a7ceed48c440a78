"""The native quantized kernel against MLX's own quantized matmul, and in the engine.

Skipped, with the reason, where the kernel cannot be built (no compiler, CMake or
nanobind) or on Metal. The first run on a machine builds it into the user's cache
(`native_build`), later runs reuse that build.
"""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from app.core.engine.cpu import backend, native_build, native_kernel

pytestmark = pytest.mark.skipif(
    backend.uses_metal(), reason="the native kernel serves the CPU backend only"
)


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _expected_paths() -> list[str]:
    flags = _cpu_flags()
    paths = []
    if {"avx2", "fma"} <= flags:
        if "avx512f" in flags:
            paths.append("avx512")
        paths.append("avx2")
    return [*paths, "scalar"]


# Every path this CPU can run is checked, not only the one it picks: an AVX-512 machine
# also tests the AVX2 loop that machines without AVX-512 take, and the scalar fallback.
PATHS = ["avx512", "avx2", "scalar"]


def _case(rng, bits: int, group: int, rows: int):
    n = int(rng.integers(1, 80))
    k = group * int(rng.integers(1, 6))
    weights = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    packed, scales, biases = mx.quantize(weights, group_size=group, bits=bits)
    x = mx.array(rng.standard_normal((rows, k)).astype(np.float32))
    expected = mx.quantized_matmul(
        x, packed, scales, biases, transpose=True, group_size=group, bits=bits
    )
    return x, packed, scales, biases, expected


@pytest.mark.parametrize(
    "algebra", [None, True, False], ids=["auto", "algebra", "rebuilt"]
)
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_matches_mlx_on_random_shapes(kernel, path, algebra, bits, group):
    if path not in kernel.simd_paths():
        pytest.skip(f"this CPU has no {path} path")
    rng = np.random.default_rng(bits * 1000 + group + PATHS.index(path))
    kernel.force_path(path)
    kernel.force_algebra(algebra)
    try:
        for rows in (1, 2, 3, 4, 5, 8, 11):
            x, packed, scales, biases, expected = _case(rng, bits, group, rows)
            got = kernel.quantized_matvec(x, packed, scales, biases, group, bits)
            mx.eval(got)
            assert got.shape == expected.shape
            bound = 1e-5 * (1.0 + float(mx.abs(expected).max())) * x.shape[-1] ** 0.5
            assert float(mx.abs(got - expected).max()) <= bound, (rows, x.shape)
    finally:
        kernel.force_path("auto")
        kernel.force_algebra(None)


def test_the_cpu_picks_its_fastest_path_and_each_can_be_forced(kernel):
    assert kernel.simd_paths() == _expected_paths()
    assert kernel.simd_path() == _expected_paths()[0]
    try:
        for path in kernel.simd_paths():
            kernel.force_path(path)
            assert kernel.simd_path() == path
        kernel.force_scalar(True)
        assert kernel.simd_path() == "scalar"
        kernel.force_scalar(False)
        assert kernel.simd_path() == _expected_paths()[0]
    finally:
        kernel.force_path("auto")


def test_forcing_a_path_this_cpu_lacks_or_an_unknown_one_raises(kernel):
    for name in {"avx512", "avx2", "neon"} - set(kernel.simd_paths()):
        with pytest.raises(ValueError, match=name):
            kernel.force_path(name)
    assert kernel.simd_path() == _expected_paths()[0]


def test_leading_dimensions_and_dtype_follow_the_input(kernel):
    rng = np.random.default_rng(7)
    x, packed, scales, biases, expected = _case(rng, 4, 64, 3)
    got = kernel.quantized_matvec(
        x.astype(mx.float16)[None], packed, scales, biases, 64, 4
    )
    assert got.shape == (1, *expected.shape)
    assert got.dtype == mx.float16
    assert float(mx.abs(got[0].astype(mx.float32) - expected).max()) < 0.05 * (
        1.0 + float(mx.abs(expected).max())
    )


@pytest.mark.parametrize("path", PATHS)
def test_threads_over_output_rows_give_the_same_result(kernel, path):
    if path not in kernel.simd_paths():
        pytest.skip(f"this CPU has no {path} path")
    rng = np.random.default_rng(3)
    # 3073 output rows (3 threads have enough weights): the slices are unequal.
    weights = mx.array(rng.standard_normal((3073, 1024)).astype(np.float32))
    packed, scales, biases = mx.quantize(weights, group_size=64, bits=4)
    x = mx.array(rng.standard_normal((2, 1024)).astype(np.float32))
    kernel.force_path(path)
    try:
        one = kernel.quantized_matvec(x, packed, scales, biases, 64, 4)
        mx.eval(one)
        for threads in (2, 3, 2):  # the pool grows, then serves fewer parts
            kernel.set_threads(threads)
            for _ in range(3):  # the same pool threads, woken again
                many = kernel.quantized_matvec(x, packed, scales, biases, 64, 4)
                mx.eval(many)
                assert mx.array_equal(one, many)
    finally:
        kernel.set_threads(1)
        kernel.force_path("auto")


def test_two_streams_share_the_thread_pool_safely(kernel):
    # Two MLX CPU streams (two worker threads) call the kernel at once with 2 pool
    # threads: one takes the pool, the other runs its rows alone; both stay exact.
    import threading

    rng = np.random.default_rng(5)
    weights = mx.array(rng.standard_normal((3073, 1024)).astype(np.float32))
    packed, scales, biases = mx.quantize(weights, group_size=64, bits=4)
    xs = [mx.array(rng.standard_normal((2, 1024)).astype(np.float32)) for _ in "ab"]
    expected = [kernel.quantized_matvec(x, packed, scales, biases, 64, 4) for x in xs]
    mx.eval(expected)
    mismatches: list[int] = []

    def work(index: int) -> None:
        stream = mx.new_stream(mx.cpu)
        for _ in range(20):
            with mx.stream(stream):
                got = kernel.quantized_matvec(xs[index], packed, scales, biases, 64, 4)
                mx.eval(got)
            if not mx.array_equal(got, expected[index]).item():
                mismatches.append(index)

    kernel.set_threads(2)
    try:
        workers = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        kernel.set_threads(1)
    assert mismatches == []


@pytest.mark.parametrize(
    ("columns", "group", "bits", "message"),
    [(128, 64, 3, "bits"), (128, 48, 4, "group"), (96, 64, 4, "columns")],
)
def test_bad_arguments_raise_value_error(kernel, columns, group, bits, message):
    packed, scales, biases = mx.quantize(mx.ones((8, 128)), group_size=64, bits=4)
    with pytest.raises(ValueError, match=message):
        kernel.quantized_matvec(
            mx.ones((1, columns)), packed, scales, biases, group, bits
        )


def _greedy(folder: Path, prompt: str, tokens: int) -> tuple[str, nn.Module]:
    from mlx_lm import generate

    from app.core.engine.loader import load_model_folder

    loaded = load_model_folder(folder)
    text = generate(loaded.model, loaded.tokenizer, prompt, max_tokens=tokens)
    return text, loaded.model


@pytest.fixture(scope="module")
def tiny_4bit_dir(tmp_path_factory):
    from app.core.modelkit.model_builder import build_model

    folder = tmp_path_factory.mktemp("models") / "tiny-4bit"
    build_model(folder, shape="tiny", bits=4, seed=1, arch="qwen2")
    return folder


@pytest.mark.parametrize("repeats", [10, 80], ids=["kernel-prefill", "widened-prefill"])
def test_greedy_text_is_the_same_with_and_without_the_kernel(
    kernel, tiny_4bit_dir, monkeypatch, repeats
):
    # ~40 prompt tokens are prefilled by the kernel in passes of 8 rows; past
    # KERNEL_ROWS tokens the layers are widened for the prefill. Decode: the kernel.
    prompt = "the quick brown fox " * repeats
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    count = len(load_tokenizer(tiny_4bit_dir).encode(prompt))
    assert (count > native_kernel.KERNEL_ROWS) == (repeats == 80), count
    with_kernel, model = _greedy(tiny_4bit_dir, prompt, 24)
    state = backend.kernel_state()
    assert state.used, state.reason
    kinds = {type(m) for _, m in model.named_modules()}
    assert native_kernel.KernelLinear in kinds
    assert nn.Linear not in kinds
    packed_bytes = backend.parameter_bytes(model)

    monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    without, dense = _greedy(tiny_4bit_dir, prompt, 24)
    assert not backend.kernel_state().used
    assert "switched off" in backend.kernel_state().reason
    assert with_kernel == without
    assert len(with_kernel) > 0
    assert backend.parameter_bytes(dense) > 2 * packed_bytes


def test_a_failed_self_test_keeps_the_float32_path(kernel, tiny_4bit_dir, monkeypatch):
    monkeypatch.setattr(native_kernel, "TOLERANCE", -1.0)
    _, model = _greedy(tiny_4bit_dir, "hello", 2)
    state = backend.kernel_state()
    assert not state.used
    assert state.reason.startswith("self-test failed")
    assert not any(
        isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding)
        for _, m in model.named_modules()
    )


def test_without_a_build_the_reason_says_how_to_get_one(
    tiny_4bit_dir, tmp_path, monkeypatch
):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path / "empty"))
    _, model = _greedy(tiny_4bit_dir, "hello", 2)
    assert backend.kernel_state() == native_kernel.KernelState(
        False, "not built (run `make native`)"
    )
    assert not any(isinstance(m, nn.QuantizedLinear) for _, m in model.named_modules())


@pytest.mark.parametrize("widen_rows", [1000, 7], ids=["whole", "pieces"])
def test_long_inputs_widen_the_layer_transiently(kernel, monkeypatch, widen_rows):
    # More than KERNEL_ROWS rows: widened to float32 for BLAS, a big matrix in pieces
    # (50 output rows in pieces of 7: the last piece is short).
    rng = np.random.default_rng(11)
    weights = mx.array(rng.standard_normal((50, 96)).astype(np.float32))
    packed, scales, biases = mx.quantize(weights, group_size=32, bits=4)
    rows = native_kernel.KERNEL_ROWS // 2 + 1
    x = mx.array(rng.standard_normal((2, rows, 96)).astype(np.float32))
    expected = mx.quantized_matmul(x, packed, scales, biases, group_size=32, bits=4)
    monkeypatch.setattr(native_kernel, "WIDEN_BYTES", 4 * 96 * widen_rows)
    got = native_kernel._project(x, packed, scales, biases, 32, 4)
    assert got.shape == (2, rows, 50)
    assert float(mx.abs(got - expected).max()) <= 1e-4 * (
        1.0 + float(mx.abs(expected).max())
    )


def test_the_float32_path_widens_the_quantized_weights_exactly(
    tiny_4bit_dir, monkeypatch
):
    # Today's path (no kernel) must compute the quantized model too: weights widened
    # at the file's bfloat16 scales were rounded to bfloat16 (logits 1 % off).
    from mlx_lm.utils import load_model

    monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    raw, _ = load_model(tiny_4bit_dir)
    layer = raw.model.layers[0].mlp.up_proj
    assert layer["scales"].dtype == mx.bfloat16
    exact = mx.dequantize(
        layer["weight"],
        layer["scales"].astype(mx.float32),
        layer["biases"].astype(mx.float32),
        layer.group_size,
        layer.bits,
    )
    _, model = _greedy(tiny_4bit_dir, "hello", 1)
    widened = model.model.layers[0].mlp.up_proj.weight
    assert widened.dtype == mx.float32
    assert mx.array_equal(widened, exact)
