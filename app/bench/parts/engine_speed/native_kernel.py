"""Native quantized kernel: 4-bit decode with packed weights vs today's float32 path.

The same 4-bit random-weight model (``native_shape``, qwen05 in a full run) is loaded
twice in this process: once with its quantized layers served by the native kernel
(`app.core.engine.cpu.native_kernel`, after its self-test) and once dequantized to
float32 as the CPU backend does without it. Decode speed is timed with plain
``mlx_lm.stream_generate`` (greedy, same prompt) in interleaved pairs, K D then D K;
the ratio is the median over pairs, and both texts must agree. Resident weight bytes
are the models' parameter bytes. The kernel's own speed is the packed bytes it reads
(weights, scales, biases) per second on the model's matrix shapes, next to the
machine's read bandwidth (`limits`) and a float32 one-row matmul of the same matrix
through MLX's BLAS (today's decode product): on its default path and threads, on each
SIMD path the CPU has, on 2 threads, by wall and by process CPU time; the matrix larger
than the last-level cache gives the roofline (kernel GB/s ÷ read bandwidth).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.parts import limits
from app.bench.results import PartResult, Row
from app.bench.stats import pair_ratios, spread_text, summarize
from app.core.engine.cpu import native_build

NAME = "native_kernel"
TITLE = "Native quantized kernel vs float32 (4-bit decode)"
RATIO_KEY = "native_kernel_decode_vs_float32"
BYTES_KEY = "native_kernel_weight_bytes_vs_float32"
BITS = 4
GROUP = 64
PROMPT_TOKENS = 64
"""Prompt of each decode run; its prefill (over 8 rows: layers widened one at a time)
is timed as the time to the first token."""


def available(ctx: BenchContext) -> str | None:
    """Runs on the CPU backend (without a build it reports why, as one row)."""
    from app.core.engine.cpu.backend import uses_metal

    if uses_metal():
        return "the native kernel serves the CPU backend only"
    return None


def _model_dir(ctx: BenchContext, shape: str) -> Path:
    from app.core.files import paths
    from app.core.modelkit.model_builder import build_model

    # Kept between runs, like the bench model: a 4-bit qwen05 takes minutes to build.
    folder = paths.models_dir() / f"bench-{shape}-{BITS}bit"
    if not (folder / "config.json").exists():
        ctx.log(f"native_kernel: building a {BITS}-bit {shape} model")
        build_model(folder, shape=shape, bits=BITS, seed=0)
    return folder


def _load(folder: Path, native: bool):
    from mlx_lm.utils import load_model, load_tokenizer

    from app.core.engine.cpu import backend

    model, _ = load_model(folder)
    model = backend.adapt_model(model, native=native)
    state = backend.kernel_state()
    return model, load_tokenizer(folder), state, backend.parameter_bytes(model)


def _decode(
    model, tokenizer, prompt: list[int], tokens: int
) -> tuple[float, list[int], float]:
    """Decode tok/s, the token ids and the time to the first token (the prefill)."""
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler

    times: list[float] = []
    ids: list[int] = []
    started = time.perf_counter()
    for response in stream_generate(
        model, tokenizer, prompt, max_tokens=tokens, sampler=make_sampler(temp=0.0)
    ):
        times.append(time.perf_counter())
        ids.append(response.token)
    tps = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return tps, ids, times[0] - started


def _first_difference(a: list[int], b: list[int]) -> int:
    """Index of the first differing greedy token (the length when none differs)."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def _interleaved_best(
    fns: dict[str, Callable[[], None]], reps: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall seconds and best process CPU seconds of each timing, in turn.

    In turn rather than one after another: on a shared machine the load swings within
    seconds, and every variant should see the same swings. CPU seconds leave out the
    time the process waited for a core, so on a loaded machine they compare
    single-threaded variants where wall time cannot (they still include memory stalls).
    """
    wall = dict.fromkeys(fns, float("inf"))
    cpu = dict.fromkeys(fns, float("inf"))
    for _ in range(reps):
        for name, fn in fns.items():
            started, started_cpu = time.perf_counter(), time.process_time()
            fn()
            wall[name] = min(wall[name], time.perf_counter() - started)
            cpu[name] = min(cpu[name], time.process_time() - started_cpu)
    return wall, cpu


def l3_bytes() -> int | None:
    """The last-level cache's size from sysfs (Linux), or None where it is not said."""
    for level in ("index3", "index2"):
        text = Path(f"/sys/devices/system/cpu/cpu0/cache/{level}/size")
        try:
            size = text.read_text().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        if size[-1:] in units and size[:-1].isdigit():
            return int(size[:-1]) * units[size[-1]]
    return None


def _matrix_speeds(
    shapes: list[tuple[int, int]], reps: int, read_bytes: int
) -> list[dict]:
    """Packed bytes/s of the kernel and float32 bytes/s of BLAS, per matrix shape.

    The kernel is timed on its default path and threads, on each SIMD path this CPU
    has (forced, one thread) and on 2 threads, interleaved with BLAS. The machine's
    read bandwidth is measured again right before each shape: on a shared machine it
    swings several-fold within minutes.
    """
    import mlx.core as mx

    from app.core.engine.cpu import native_kernel

    kernel = native_kernel.load_module()
    assert kernel is not None, "available() checked the build"
    batch = 8  # products per evaluation: one round trip is tens of microseconds
    threads = kernel.threads()
    paths = [p for p in kernel.simd_paths() if p != "scalar"]
    cache = l3_bytes()
    found = []
    for rows, columns in shapes:
        dense = mx.random.normal((rows, columns))
        packed, scales, biases = mx.quantize(dense, group_size=GROUP, bits=BITS)
        dense = mx.dequantize(packed, scales, biases, GROUP, BITS)
        xs = [mx.random.normal((1, columns)) for _ in range(batch)]
        mx.eval(dense, packed, scales, biases, *xs)
        read = packed.nbytes + scales.nbytes + biases.nbytes

        def kern(
            path="auto",
            count=threads,
            packed=packed,
            scales=scales,
            biases=biases,
            xs=xs,
        ):
            kernel.force_path(path)
            kernel.set_threads(count)
            try:
                mx.eval(
                    [
                        kernel.quantized_matvec(x, packed, scales, biases, GROUP, BITS)
                        for x in xs
                    ]
                )
            finally:
                kernel.force_path("auto")
                kernel.set_threads(threads)

        def blas(dense=dense, xs=xs):
            mx.eval([x @ dense.T for x in xs])

        fns: dict[str, Callable[[], None]] = {
            "kernel": kern,
            "blas": blas,
            "two_threads": partial(kern, count=2),
        }
        for path in paths:
            fns[path] = partial(kern, path, 1)
        for fn in fns.values():
            fn()  # warm: first calls allocate and start the pool's threads
        read_now = limits.read_bandwidth(reps, read_bytes)
        wall, cpu = _interleaved_best(fns, reps)
        best = {name: seconds / batch for name, seconds in wall.items()}
        best_cpu = {name: seconds / batch for name, seconds in cpu.items()}
        kernel_s = best["kernel"]
        found.append(
            {
                "shape": [rows, columns],
                "path": kernel.simd_path(),
                "threads": threads,
                "kernel_read_bytes": read,
                "fits_in_last_level_cache": None if cache is None else read <= cache,
                "kernel_us": kernel_s * 1e6,
                "float32_blas_us": best["blas"] * 1e6,
                "kernel_bytes_per_s": read / kernel_s,
                "float32_bytes_per_s": dense.nbytes / best["blas"],
                "kernel_vs_float32_speed": best["blas"] / kernel_s,
                "kernel_two_threads_bytes_per_s": read / best["two_threads"],
                "path_bytes_per_s": {path: read / best[path] for path in paths},
                # One thread: CPU time is its running time (2 threads would add up).
                "path_bytes_per_cpu_s": {
                    path: read / max(best_cpu[path], 1e-9) for path in paths
                },
                "kernel_vs_float32_cpu_speed": best_cpu["blas"]
                / max(best_cpu["kernel"], 1e-9),
                "read_bytes_per_s_now": read_now,
                "kernel_vs_read_bandwidth_now": read / kernel_s / read_now,
            }
        )
        del dense, packed, scales, biases
    return found


def _measure(ctx: BenchContext, folder: Path, shape: str) -> dict:
    from mlx_lm.utils import load_config

    s = ctx.settings
    kernel_model, tokenizer, state, kernel_bytes = _load(folder, native=True)
    if not state.used:
        raise RuntimeError(f"the kernel was not used: {state.reason}")
    dense_model, _, _, dense_bytes = _load(folder, native=False)
    prompt = list(range(10, 10 + PROMPT_TOKENS))
    tokens = s.native_decode_tokens
    _decode(kernel_model, tokenizer, prompt, 2)  # warm both
    _decode(dense_model, tokenizer, prompt, 2)
    kernel_runs: list[tuple[float, list[int], float]] = []
    dense_runs: list[tuple[float, list[int], float]] = []
    for pair in range(s.native_pairs):
        order = [(kernel_model, kernel_runs), (dense_model, dense_runs)]
        for model, runs in order if pair % 2 == 0 else order[::-1]:
            runs.append(_decode(model, tokenizer, prompt, tokens))
    del dense_model, kernel_model
    config = load_config(folder)
    hidden, inner = config["hidden_size"], config["intermediate_size"]
    shapes = [(inner, hidden), (hidden, inner), (config["vocab_size"], hidden)]
    return {
        "kernel_path": state.reason,
        "kernel_tps": [r[0] for r in kernel_runs],
        "float32_tps": [r[0] for r in dense_runs],
        "kernel_ttft_s": [r[2] for r in kernel_runs],
        "float32_ttft_s": [r[2] for r in dense_runs],
        "same_text": all(
            k[1] == d[1] for k, d in zip(kernel_runs, dense_runs, strict=True)
        ),
        "first_difference": _first_difference(kernel_runs[0][1], dense_runs[0][1]),
        "kernel_weight_bytes": kernel_bytes,
        "float32_weight_bytes": dense_bytes,
        "matrices": _matrix_speeds(shapes, s.native_reps, s.limits_read_bytes),
    }


def run(ctx: BenchContext) -> PartResult:
    """Time decode both ways and the kernel's bandwidth; return the ratios."""
    s = ctx.settings
    built = native_build.state()
    if built.path is None:
        # Not a skip: the run's other verdicts stay complete on a machine without a
        # compiler; the table says why there is no comparison.
        result = PartResult()
        result.figures = {"built": False, "reason": built.reason}
        result.rows = [Row("Native kernel", f"unavailable: {built.reason}")]
        return result
    folder = _model_dir(ctx, s.native_shape)
    read_bw = limits.for_run(ctx).read_bytes_per_s
    found = ctx.engine.submit(_measure, ctx, folder, s.native_shape).result()
    ratios = summarize(pair_ratios(found["kernel_tps"], found["float32_tps"]))
    # Prefill speed ratio: float32's time to first token ÷ the kernel model's.
    prefill = summarize(pair_ratios(found["float32_ttft_s"], found["kernel_ttft_s"]))
    bytes_ratio = found["kernel_weight_bytes"] / found["float32_weight_bytes"]
    for matrix in found["matrices"]:
        matrix["kernel_vs_read_bandwidth"] = matrix["kernel_bytes_per_s"] / read_bw
    result = PartResult()
    result.figures = {
        "built": True,
        "shape": s.native_shape,
        "bits": BITS,
        "group_size": GROUP,
        "prompt_tokens": PROMPT_TOKENS,
        "decode_tokens": s.native_decode_tokens,
        "kernel_path": found["kernel_path"],
        "kernel_decode_tps": summarize(found["kernel_tps"]),
        "float32_decode_tps": summarize(found["float32_tps"]),
        "kernel_ttft_s": summarize(found["kernel_ttft_s"]),
        "float32_ttft_s": summarize(found["float32_ttft_s"]),
        "prefill_speed_ratio": prefill,
        "same_greedy_text": found["same_text"],
        "greedy_tokens_equal_before_first_difference": found["first_difference"],
        "kernel_weight_bytes": found["kernel_weight_bytes"],
        "float32_weight_bytes": found["float32_weight_bytes"],
        "read_bytes_per_s": read_bw,
        "last_level_cache_bytes": l3_bytes(),
        "matrices": found["matrices"],
        "ratio": ratios,
    }
    result.ratios[RATIO_KEY] = ratios["median"]
    result.ratio_stats[RATIO_KEY] = ratios
    result.ratios[BYTES_KEY] = bytes_ratio
    label = f"{s.native_shape}, {BITS}-bit g{GROUP}, {s.native_decode_tokens} tokens"
    result.rows = [
        Row(
            f"Decode tok/s, kernel ÷ float32 dequantized ({label})",
            f"{ratios['median']:.2f}",
            spread_text(ratios, 2),
        ),
        Row(
            f"Prefill speed ({PROMPT_TOKENS}-token prompt, time to first token), "
            "kernel model ÷ float32",
            f"{prefill['median']:.2f}",
            spread_text(prefill, 2),
        ),
        Row(
            f"Resident weight bytes, kernel ÷ float32 ({s.native_shape})",
            f"{bytes_ratio:.3f}",
        ),
        Row(
            "Same greedy tokens both ways (else: tokens equal before the first "
            "difference; random weights leave near-tied logits)",
            "yes" if found["same_text"] else f"no ({found['first_difference']})",
        ),
    ]
    for matrix in found["matrices"]:
        rows, columns = matrix["shape"]
        by_path = ", ".join(
            f"{path} {speed / 1e9:.2f} ({matrix['path_bytes_per_cpu_s'][path] / 1e9:.2f} "
            "per CPU second)"
            for path, speed in matrix["path_bytes_per_s"].items()
        )
        result.rows.append(
            Row(
                f"Kernel read bandwidth ÷ machine's measured just before, "
                f"{rows}×{columns} one-row product (kernel {matrix['path']}, "
                f"{matrix['threads']} thread(s) {matrix['kernel_bytes_per_s'] / 1e9:.2f} GB/s; "
                f"1 thread by path: {by_path}; 2 threads "
                f"{matrix['kernel_two_threads_bytes_per_s'] / 1e9:.2f}; kernel ÷ float32 BLAS "
                f"speed {matrix['kernel_vs_float32_speed']:.2f}, per CPU second "
                f"{matrix['kernel_vs_float32_cpu_speed']:.2f})",
                f"{matrix['kernel_vs_read_bandwidth_now']:.2f}",
            )
        )
    roofline = [m for m in found["matrices"] if m["fits_in_last_level_cache"] is False]
    if roofline:
        # Only a matrix larger than the last-level cache is read from memory each time;
        # the smaller ones are served from cache after the first product.
        top = max(roofline, key=lambda m: m["kernel_read_bytes"])
        rows, columns = top["shape"]
        result.figures["roofline"] = {
            "shape": top["shape"],
            "kernel_bytes_per_s": top["kernel_bytes_per_s"],
            "vs_limits_read_bandwidth": top["kernel_bytes_per_s"] / read_bw,
        }
        result.rows.append(
            Row(
                f"Roofline: kernel GB/s on {rows}×{columns} "
                f"({top['kernel_read_bytes'] / 2**20:.0f} MiB packed, larger than the "
                f"{(l3_bytes() or 0) / 2**20:.0f} MiB last-level cache) ÷ read bandwidth "
                "(limits)",
                f"{top['kernel_bytes_per_s'] / read_bw:.2f}",
            )
        )
    result.notes.append(
        f"Kernel path: {found['kernel_path']}. Read bandwidth "
        f"{read_bw / 1e9:.1f} GB/s (limits); kernel bytes are the packed weights, "
        "scales and biases it reads."
    )
    return result
