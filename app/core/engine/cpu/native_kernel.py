"""Quantized layers that stay quantized on the CPU backend, through the native kernel.

When the kernel (`native_build`) is built and passes a self-test against
``mx.quantized_matmul`` on the loaded model's own layers, the model's affine 4- and
8-bit `QuantizedLinear` layers (and a tied `QuantizedEmbedding`'s output projection)
call it for inputs of up to `KERNEL_ROWS` rows (decode and the engine's prefill chunks),
reading the packed weights directly. Longer inputs widen one layer at a time to float32
with the kernel's own ``dequantize_f32`` for the BLAS matmul and drop it: transient,
never resident. Otherwise the caller keeps today's path (dequantize everything to
float32), and `kernel_state` says why.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

import mlx.core as mx
import mlx.nn as nn

from app.core.engine.cpu import native_build

KERNEL_ROWS = 512
"""Inputs with at most this many rows go through the kernel (in passes of 8 rows);
longer ones widen the layer for BLAS. Measured on qwen05's shapes (docs/native-kernel.md,
"Long inputs"): the kernel's passes took 0.24-0.46 of the time of the kernel's own
widening plus BLIS's generic float32 matmul at 1 to 256 rows (35 GFLOP/s on this AMD
EPYC, the kernel 90-140). With BLIS's AVX-512 kernels (188 GFLOP/s, `cli.blas.blis_arch`)
widening wins from 64-128 rows, 1.2-1.8x at 512; but the engine's chunks aim at 0.3 s
(`generation.PREFILL_CHUNK_SECONDS`), ~30 rows at 100 tok/s, where the kernel is 2-5x
faster. So every chunk the engine prefills takes the kernel; longer inputs (mlx-lm's own
2,048-token prefill steps) widen, holding at most `WIDEN_BYTES`."""
SUPPORTED = native_build.SUPPORTED
"""(bits, group) pairs the kernel computes (kept with the MLX-free build code, which
the memory budget reads)."""
WIDEN_BYTES = 32 * 2**20
"""Most float32 bytes of one matrix widened at a time for a long input: a large output
projection (a 151936-row vocabulary) is widened and multiplied in pieces."""
TOLERANCE = 1e-4
"""Self-test bound on ``|kernel - mx.quantized_matmul|`` relative to the output's scale."""
SELF_TEST_ROWS = 19
"""Input rows of the self-test's longer product: two full passes of 8 rows and a
partial one, each long row (the MLP's down projection) in column slices."""
SELF_TEST_OUTPUTS = 256
"""Output rows the longer checks use (a vocabulary-sized matrix whole would take MLX's
scalar quantized matmul seconds)."""


@dataclass(frozen=True)
class KernelState:
    """Whether quantized layers use the native kernel, and why (one line)."""

    used: bool
    reason: str


@lru_cache(maxsize=1)
def load_module() -> ModuleType | None:
    """Import the built kernel, or None when there is none for this installation."""
    built = native_build.state()
    if built.path is None:
        return None
    spec = importlib.util.spec_from_file_location(native_build.MODULE_NAME, built.path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _kernel() -> ModuleType:
    module = load_module()
    if module is None:
        raise RuntimeError("the native kernel is not built")
    return module


def _project(
    x: mx.array,
    weight: mx.array,
    scales: mx.array,
    biases: mx.array,
    group: int,
    bits: int,
) -> mx.array:
    rows = x.size // x.shape[-1]
    kernel = _kernel()
    if rows <= KERNEL_ROWS:
        return kernel.quantized_matvec(x, weight, scales, biases, group, bits)
    # A long input: one layer widened by the kernel (bit for bit mx.dequantize, ~10x
    # faster than MLX's CPU dequantize) for the BLAS matmul, freed once the product is
    # done. Without the dependency on x, MLX may widen several layers ahead of their
    # turn (they depend on nothing computed), holding them all at once.
    weight = mx.depends(weight, x)
    piece = max(1, WIDEN_BYTES // (4 * x.shape[-1]))
    outputs = []
    for start in range(0, weight.shape[0], piece):
        end = start + piece
        wide = kernel.dequantize_f32(
            weight[start:end], scales[start:end], biases[start:end], group, bits
        )
        outputs.append(
            x @ (wide.T if x.dtype == mx.float32 else wide.T.astype(x.dtype))
        )
    return outputs[0] if len(outputs) == 1 else mx.concatenate(outputs, axis=-1)


class KernelLinear(nn.QuantizedLinear):
    """A `QuantizedLinear` whose product runs through the native kernel."""

    def __call__(self, x: mx.array) -> mx.array:
        """Return ``x @ W.T (+ bias)`` with ``W`` kept packed."""
        out = _project(
            x,
            self["weight"],
            self["scales"],
            self["biases"],
            self.group_size,
            self.bits,
        )
        if "bias" in self:
            out = out + self["bias"]
        return out


class KernelEmbedding(nn.QuantizedEmbedding):
    """A `QuantizedEmbedding` whose tied output projection runs through the kernel."""

    def as_linear(self, x: mx.array) -> mx.array:
        """Return ``x @ E.T`` with ``E`` kept packed."""
        return _project(
            x,
            self["weight"],
            self["scales"],
            self["biases"],
            self.group_size,
            self.bits,
        )


def _quantized_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    return [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.QuantizedLinear | nn.QuantizedEmbedding)
    ]


def unsupported_reason(model: nn.Module) -> str | None:
    """Why the kernel cannot serve this model's quantized layers, or None."""
    for name, module in _quantized_layers(model):
        mode = getattr(module, "mode", "affine")
        if mode != "affine" or module.get("biases") is None:
            return f"layer {name} uses {mode} quantization (the kernel is affine only)"
        if (module.bits, module.group_size) not in SUPPORTED:
            return (
                f"layer {name} is {module.bits}-bit, group {module.group_size} "
                "(the kernel serves 4/8-bit, groups 32/64/128)"
            )
    return None


def self_test(model: nn.Module, seed: int = 0) -> str | None:
    """Compare the kernel with MLX's own ops on each distinct layer shape.

    Uses the model's own packed weights (float32 scales, as on the CPU backend):
    ``quantized_matvec`` against ``mx.quantized_matmul`` with 1 and 3 random input rows,
    and with `SELF_TEST_ROWS` rows (several passes over the weights, and the column
    slices of long rows) on the first `SELF_TEST_OUTPUTS` output rows; and
    ``dequantize_f32`` (the widening of inputs longer than `KERNEL_ROWS`) against
    ``mx.dequantize`` on those rows. Returns None when all agree, else the first
    mismatch.
    """
    seen: set[tuple[int, ...]] = set()
    key = mx.random.key(seed)
    kernel = _kernel()
    for name, module in _quantized_layers(model):
        weight, scales, biases = module["weight"], module["scales"], module["biases"]
        shape = (*weight.shape, module.bits, module.group_size)
        if shape in seen:
            continue
        seen.add(shape)
        group, bits = module.group_size, module.bits
        columns = weight.shape[1] * 32 // bits
        w, s, b = weight, scales.astype(mx.float32), biases.astype(mx.float32)
        cut = SELF_TEST_OUTPUTS
        head = (w[:cut], s[:cut], b[:cut])
        for rows, (ws, ss, bs) in (
            (1, (w, s, b)),
            (3, (w, s, b)),
            (SELF_TEST_ROWS, head),
        ):
            key, sub = mx.random.split(key)
            x = mx.random.normal((rows, columns), key=sub)
            expected = mx.quantized_matmul(
                x, ws, ss, bs, transpose=True, group_size=group, bits=bits
            )
            got = kernel.quantized_matvec(x, ws, ss, bs, group, bits)
            if not _close(got, expected):
                error = _error(got, expected)
                return f"layer {name}: error {error:.3g} against mx.quantized_matmul"
        expected = mx.dequantize(*head, group_size=group, bits=bits)
        got = kernel.dequantize_f32(*head, group, bits)
        if not _close(got, expected):
            error = _error(got, expected)
            return f"layer {name}: error {error:.3g} against mx.dequantize"
    return None


def _error(got: mx.array, expected: mx.array) -> float:
    return float(mx.abs(got - expected).max())


def _close(got: mx.array, expected: mx.array) -> bool:
    scale = float(mx.abs(expected).max()) + 1.0
    return got.shape == expected.shape and _error(got, expected) <= TOLERANCE * scale


def install(model: nn.Module) -> KernelState:
    """Route the model's quantized layers through the kernel if it is usable.

    Args:
        model: A model as mlx-lm loaded it (quantized layers untouched).

    Returns:
        Whether the kernel is now used, and the one-line reason.
    """
    if native_build.disabled():
        return KernelState(False, f"switched off ({native_build.DISABLE_ENV}=0)")
    layers = _quantized_layers(model)
    if not layers:
        return KernelState(False, "the model has no quantized layers")
    why = unsupported_reason(model)
    if why is not None:
        return KernelState(False, why)
    built = native_build.state()
    if built.path is None:
        return KernelState(False, built.reason)
    try:
        module = load_module()
        if module is None:
            return KernelState(False, "built kernel does not import")
        failed = self_test(model)
    except Exception as exc:  # a build against another MLX/nanobind fails in many ways
        return KernelState(
            False, f"built kernel unusable ({type(exc).__name__}: {exc})"
        )
    if failed is not None:
        return KernelState(False, f"self-test failed: {failed}")
    for _, layer in layers:
        # The subclasses add behaviour, not state: switching the class keeps the loaded
        # parameters (a new QuantizedLinear would first quantize a random matrix).
        if isinstance(layer, nn.QuantizedLinear):
            layer.__class__ = KernelLinear
        else:
            layer.__class__ = KernelEmbedding
    return KernelState(True, f"used ({module.simd_path()} path, self-test passed)")
