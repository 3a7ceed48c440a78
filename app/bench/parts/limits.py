"""The machine's limits, measured in the same run: read bandwidth and fp32 GEMM peak.

Speeds mean little without them: decoding reads every weight and the whole KV cache per
token, so its ceiling is the memory's read bandwidth; a prefill is matmuls, so its
ceiling is the GEMM peak. Both are measured here, best of a few repetitions (the best is
the one least disturbed by other jobs on a shared machine), and the other parts report
their speeds as fractions of them:

- read bandwidth: numpy summing a 1 GiB float32 array (one thread; on the reference
  machine two threads were no faster);
- fp32 GEMM peak: MLX multiplying two 2048x2048 float32 matrices, i.e. the BLAS MLX
  uses in this process;
- one-row GEMM: MLX multiplying one row by a 151936x896 matrix (Qwen2.5-0.5B's lm_head),
  what decoding asks of the BLAS, in GB/s of the matrix read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.bench.context import BenchContext
from app.bench.results import PartResult, Row

NAME = "limits"
TITLE = "Machine limits (read bandwidth, fp32 GEMM peak)"
GIB = 2**30


@dataclass(frozen=True)
class Limits:
    """What this machine can do at best, as measured now.

    Attributes:
        read_bytes_per_s: Memory read bandwidth.
        gemm_flops_per_s: fp32 GEMM peak through MLX's BLAS.
        row_gemm_bytes_per_s: Matrix bytes read per second by a one-row matmul.
    """

    read_bytes_per_s: float
    gemm_flops_per_s: float
    row_gemm_bytes_per_s: float

    def to_dict(self) -> dict:
        """Return the figures as JSON-ready values."""
        return {
            "read_bytes_per_s": self.read_bytes_per_s,
            "gemm_flops_per_s": self.gemm_flops_per_s,
            "row_gemm_bytes_per_s": self.row_gemm_bytes_per_s,
        }


def _best_seconds(function, repetitions: int) -> float:
    function()  # warm-up: page faults, BLAS thread start, MLX kernels
    best = float("inf")
    for _ in range(repetitions):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return best


def read_bandwidth(repetitions: int, size_bytes: int) -> float:
    """Bytes per second numpy reads while summing a float32 array of ``size_bytes``."""
    import numpy as np

    array = np.ones(size_bytes // 4, dtype=np.float32)
    return size_bytes / _best_seconds(array.sum, repetitions)


def gemm_peak(repetitions: int, size: int) -> float:
    """fp32 FLOP/s of MLX multiplying two ``size`` x ``size`` matrices."""
    import mlx.core as mx

    a = mx.random.normal((size, size))
    b = mx.random.normal((size, size))
    mx.eval(a, b)
    seconds = _best_seconds(lambda: mx.eval(a @ b), repetitions)
    return 2 * size**3 / seconds


def row_gemm_bandwidth(repetitions: int, shape: tuple[int, ...]) -> float:
    """Matrix bytes per second of MLX multiplying one row by a ``shape`` matrix^T."""
    import mlx.core as mx

    weight = mx.random.normal(shape)
    row = mx.random.normal((1, shape[1]))
    mx.eval(weight, row)
    seconds = _best_seconds(lambda: mx.eval(row @ weight.T), repetitions)
    return weight.nbytes / seconds


def measure(settings) -> Limits:
    """Measure every limit at the sizes of ``settings`` (a `BenchSettings`)."""
    reps = settings.limits_repetitions
    return Limits(
        read_bytes_per_s=read_bandwidth(reps, settings.limits_read_bytes),
        gemm_flops_per_s=gemm_peak(reps, settings.limits_gemm_size),
        row_gemm_bytes_per_s=row_gemm_bandwidth(reps, settings.limits_row_matrix),
    )


def for_run(ctx: BenchContext) -> Limits:
    """The limits of this run: measured by this part, or now if it did not run first."""
    if ctx.limits is None:
        ctx.limits = ctx.engine.submit(measure, ctx.settings).result()
    assert isinstance(ctx.limits, Limits), "only this module sets it"
    return ctx.limits


def available(ctx: BenchContext) -> str | None:
    """Always available."""
    return None


def run(ctx: BenchContext) -> PartResult:
    """Measure the limits on the engine thread (where MLX runs)."""
    ctx.limits = None
    limits = for_run(ctx)
    s = ctx.settings
    reps = s.limits_repetitions
    rows, cols = s.limits_row_matrix
    result = PartResult()
    result.figures = {
        **limits.to_dict(),
        "read_bytes": s.limits_read_bytes,
        "gemm_size": s.limits_gemm_size,
        "row_matrix": list(s.limits_row_matrix),
        "repetitions": reps,
    }
    result.rows = [
        Row(
            f"Limit: read bandwidth (numpy sum of {s.limits_read_bytes / GIB:g} GiB "
            f"float32, best of {reps})",
            f"{limits.read_bytes_per_s / 1e9:.1f} GB/s",
        ),
        Row(
            f"Limit: fp32 GEMM peak (MLX {s.limits_gemm_size}x{s.limits_gemm_size}, "
            f"best of {reps})",
            f"{limits.gemm_flops_per_s / 1e9:.0f} GFLOP/s",
        ),
        Row(
            f"One-row fp32 matmul, {rows}x{cols} matrix (a decode step's lm_head), "
            "÷ read bandwidth",
            f"{limits.row_gemm_bytes_per_s / 1e9:.1f} GB/s "
            f"({limits.row_gemm_bytes_per_s / limits.read_bytes_per_s:.2f})",
        ),
    ]
    return result
