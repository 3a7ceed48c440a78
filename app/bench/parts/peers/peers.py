"""llama.cpp side by side with Swapless: prefill, decode and peak RSS on the same model.

What a Linux user would run instead of Swapless is llama.cpp (directly, through Ollama
or LM Studio), so this part measures both on one model, at the same thread counts,
interleaved:

- the model: a random-weight model of ``peers_shape`` (qwen05: Qwen2.5-0.5B's geometry)
  built once in bfloat16 by the model kit; each side quantizes those same weights its
  own way, as a user gets them from one Hugging Face checkpoint: Swapless's 4-bit
  folder is the kit's ``--bits 4`` build of the same seed (mlx-lm's affine 4-bit,
  group 64; checked equal to quantizing the bfloat16 weights here), llama.cpp's is its
  converter's f16 GGUF quantized to Q4_0 by ``llama-quantize``. Requantizing MLX's
  4-bit weights instead would stack two roundings on llama.cpp's side only;
- llama.cpp: one ``llama-bench`` process per test (``-p`` prefill, ``-n`` decode at
  depth ``-d``, ``-t`` threads, its defaults otherwise: f16 KV, its own warm-up);
- Swapless: its engine in a worker process per thread count (`swapless_worker`), the
  native kernel used when built (``make native``), 16-bit KV;
- the order alternates test by test (llama.cpp first, then Swapless first, …), over
  ``peers_rounds`` rounds; a ratio is the median of the per-round Swapless ÷
  llama.cpp pairs, so above 1 Swapless is faster (for RSS: uses more);
- peak RSS: each process's own, from the kernel (``ru_maxrss``): for llama.cpp the
  largest over its runs, for Swapless its worker's over all its tests.

Without llama-bench the part reports one row: skipped, why, and how to get one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.parts import limits as machine_limits
from app.bench.parts.peers import chat_turns, llama_side
from app.bench.parts.peers.swapless_worker import MARKER
from app.bench.results import PartResult, Row, yes_no
from app.bench.stats import pair_ratios, spread_text, summarize
from app.bench.worker_process import WorkerProcess

NAME = "peers"
TITLE = "llama.cpp side by side (prefill, decode, peak RSS)"
RATIO_KEY = "swapless_vs_llama_cpp"
BITS = 4
GROUP = 64
SEED = 0
TARGETS = {"prefill": 0.8, "decode": 0.8, "peak_rss": 1.3}
"""Issue 32's targets: speed at least 0.8x llama.cpp's, peak RSS at most 1.3x."""
_FLASH = {-1: "auto", 0: "off", 1: "on"}  # llama-bench's JSON writes the enum
THREAD_VARIABLES = ("BLIS_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


def available(ctx: BenchContext) -> str | None:
    """Needs a source checkout (worker processes) and the CPU backend.

    A machine without llama.cpp is not a skip: the part reports one row saying so and
    how to get it, and the run's other verdicts stay complete.
    """
    if getattr(sys, "frozen", False):
        return "needs a source checkout: a frozen app cannot start Python workers"
    from app.core.engine.cpu.backend import uses_metal

    if uses_metal():
        return "compares the CPU backend; on Metal llama.cpp would run on the GPU"
    return None


def _models(ctx: BenchContext, shape: str) -> tuple[Path, Path]:
    """The bfloat16 source and Swapless's 4-bit build of it (built once each)."""
    from app.core.files import paths
    from app.core.modelkit.model_builder import build_model

    folders = []
    for bits in (16, BITS):
        # Kept between runs (qwen05 takes minutes); the 4-bit one is native_kernel's.
        folder = paths.models_dir() / f"bench-{shape}-{bits}bit"
        if not (folder / "config.json").exists():
            ctx.log(f"peers: building a {bits}-bit {shape} model")
            build_model(folder, shape=shape, bits=bits, seed=SEED)
        folders.append(folder)
    return folders[0], folders[1]


def same_weights(source: Path, quantized: Path) -> bool:
    """Whether the 4-bit folder is the bfloat16 one quantized (one layer compared)."""
    import mlx.core as mx

    name = "model.layers.0.self_attn.q_proj"
    floats = mx.load(str(source / "model.safetensors"))
    stored = mx.load(str(quantized / "model.safetensors"))
    assert isinstance(floats, dict) and isinstance(stored, dict), "safetensors load"
    dense = floats[f"{name}.weight"]
    packed, scales, biases = mx.quantize(dense, group_size=GROUP, bits=BITS)
    return all(
        bool(mx.array_equal(mine, stored[f"{name}.{key}"]))
        for mine, key in ((packed, "weight"), (scales, "scales"), (biases, "biases"))
    )


class _Worker(WorkerProcess):
    """Swapless's engine in its own process, at one thread count."""

    def __init__(
        self, model: Path, threads: int, scratch: Path, log_path: Path, chat_tokens: int
    ):
        scratch.mkdir(parents=True, exist_ok=True)
        config = {
            "model": str(model),
            "threads": threads,
            "scratch": str(scratch),
            "chat_max_tokens": chat_tokens,
        }
        super().__init__(
            "app.bench.parts.peers.swapless_worker",
            config,
            marker=MARKER,
            log_path=log_path,
            env=dict(os.environ, **dict.fromkeys(THREAD_VARIABLES, str(threads))),
            name="Swapless",
            quit_timeout=60,
        )
        self.prompts = 0  # prefill prompts sent: each gets its own seed


def _tests(s) -> list[tuple[str, int]]:
    return [("prefill", n) for n in s.peers_prefill] + [
        ("decode", d) for d in s.peers_depths
    ]


def _measure(ctx, tools, gguf: Path, model: Path, work: Path, chat: bool) -> dict:
    """Every test at every thread count, alternating sides; the raw figures.

    With ``chat``, the workers then hold the chat with llama-cpp-python (`chat_turns`);
    its figures are under ``found["chat"]``.
    """
    s = ctx.settings
    tests = _tests(s)
    found: dict = {}
    workers: dict[int, _Worker] = {}
    try:
        for threads in s.peers_threads:
            workers[threads] = _Worker(
                model,
                threads,
                work / f"scratch-{threads}",
                work / f"worker-{threads}.log",
                s.peers_chat_max_tokens,
            )
            found[str(threads)] = {
                "worker": workers[threads].ready,
                "tests": {
                    f"{kind}_{size}": {"llama_cpp": [], "swapless": []}
                    for kind, size in tests
                },
                "llama_cpp_peak_rss_bytes": 0,
            }
        step = 0
        for round_index in range(s.peers_rounds):
            for threads in s.peers_threads:
                cell = found[str(threads)]
                for kind, size in tests:
                    sides = ["llama_cpp", "swapless"]
                    for side in sides if step % 2 == 0 else sides[::-1]:
                        if side == "llama_cpp":
                            got = _llama(tools, gguf, threads, kind, size, s, work)
                            cell["llama_cpp_peak_rss_bytes"] = max(
                                cell["llama_cpp_peak_rss_bytes"], got["peak_rss_bytes"]
                            )
                        else:
                            got = _swapless(workers[threads], kind, size, s)
                            cell["swapless_peak_rss_bytes"] = got["peak_rss_bytes"]
                        cell["tests"][f"{kind}_{size}"][side].append(got)
                    step += 1
                    pair = cell["tests"][f"{kind}_{size}"]
                    ctx.log(
                        f"  peers round {round_index + 1}, {threads} thread(s), "
                        f"{kind} {size}: llama.cpp {pair['llama_cpp'][-1]['tps']:.1f}, "
                        f"Swapless {pair['swapless'][-1]['tps']:.1f} tok/s"
                    )
        if chat:
            found["chat"] = chat_turns.measure(ctx, tools.python, gguf, workers, work)
    finally:
        for worker in workers.values():
            worker.close()
    return found


def _llama(tools, gguf, threads, kind, size, s, work) -> dict:
    if kind == "prefill":
        shape = {"prompt": size}
    else:
        shape = {"generate": s.peers_decode_tokens, "depth": size}
    return llama_side.run_bench(
        tools, gguf, threads, **shape, log_path=work / "llama-bench.log"
    )


def _swapless(worker: _Worker, kind: str, size: int, s) -> dict:
    if kind == "prefill":
        # A new seed per run: nothing of an earlier prompt can be reused.
        worker.prompts += 1
        return worker.ask(op="prefill", tokens=size, seed=worker.prompts)
    return worker.ask(op="decode", depth=size, tokens=s.peers_decode_tokens, seed=0)


def run(ctx: BenchContext) -> PartResult:
    """Convert the model, run both sides interleaved, return the ratios."""
    s = ctx.settings
    tools, reason = llama_side.find_tools(s.llama_bench)
    if tools is None:
        result = PartResult()
        result.figures = {"llama_cpp_found": False, "reason": reason}
        result.rows = [Row("llama.cpp side by side", f"skipped: {reason}")]
        return result
    limits = machine_limits.for_run(ctx)
    source, quantized = _models(ctx, s.peers_shape)
    identical = ctx.engine.submit(same_weights, source, quantized).result()
    if not identical:
        raise RuntimeError(f"{quantized} is not {source} quantized: delete both")
    gguf, made = llama_side.convert(
        tools, source, source.parent / f"bench-{s.peers_shape}-gguf", ctx.log
    )
    work = (ctx.scratch or ctx.out_dir) / "peers"
    work.mkdir(parents=True, exist_ok=True)
    no_chat = chat_turns.binding_missing(tools.python)
    found = _measure(ctx, tools, gguf, quantized, work, chat=no_chat is None)
    result = _result(s, tools, gguf, made, found, limits)
    if no_chat:
        result.rows.append(
            Row("Multi-turn chat with llama-cpp-python", f"skipped: {no_chat}")
        )
    else:
        chat_rows, chat_ratios = chat_turns.rows(s, found["chat"])
        result.rows.extend(chat_rows)
        for key, values in chat_ratios.items():
            result.ratios[RATIO_KEY][key].update(values)
    return result


def _result(s, tools, gguf, made, found, limits) -> PartResult:
    result = PartResult()
    ratios: dict = {}
    stats: dict = {}
    for threads in s.peers_threads:
        cell = found[str(threads)]
        key = f"threads_{threads}"
        ratios[key], stats[key] = {}, {}
        for kind, size in _tests(s):
            name = f"{kind}_{size}"
            pair = cell["tests"][name]
            llama = [run["tps"] for run in pair["llama_cpp"]]
            mine = [run["tps"] for run in pair["swapless"]]
            ratio = summarize(pair_ratios(mine, llama))
            ratios[key][name], stats[key][name] = ratio["median"], ratio
            target = TARGETS[kind]
            what = "Prefill" if kind == "prefill" else "Decode"
            where = f"{size} tokens" if kind == "prefill" else f"at depth {size}"
            result.rows.append(
                Row(
                    f"{what} {where}, {threads} thread(s), Swapless ÷ llama.cpp "
                    f"(tok/s: Swapless {summarize(mine)['median']:.1f}, llama.cpp "
                    f"{summarize(llama)['median']:.1f})",
                    f"{ratio['median']:.2f}",
                    spread_text(ratio, 2),
                    f"≥ {target:g}",
                    yes_no(ratio["median"] >= target),
                )
            )
        rss = cell["swapless_peak_rss_bytes"] / cell["llama_cpp_peak_rss_bytes"]
        ratios[key]["peak_rss"] = rss
        result.rows.append(
            Row(
                f"Peak RSS, {threads} thread(s), Swapless ÷ llama.cpp (Swapless "
                f"{cell['swapless_peak_rss_bytes'] / 1e9:.2f} GB, llama.cpp "
                f"{cell['llama_cpp_peak_rss_bytes'] / 1e9:.2f} GB)",
                f"{rss:.2f}",
                target=f"≤ {TARGETS['peak_rss']:g}",
                held=yes_no(rss <= TARGETS["peak_rss"]),
            )
        )
    result.ratios[RATIO_KEY] = ratios
    result.ratio_stats[RATIO_KEY] = stats
    first = found[str(s.peers_threads[0])]
    some_test = next(iter(first["tests"].values()))["llama_cpp"][0]
    result.figures = {
        "llama_cpp_found": True,
        "shape": s.peers_shape,
        "threads": list(s.peers_threads),
        "prefill_tokens": list(s.peers_prefill),
        "decode_depths": list(s.peers_depths),
        "decode_tokens": s.peers_decode_tokens,
        "rounds": s.peers_rounds,
        "tools": tools.to_dict(),
        "gguf": str(gguf),
        "made": made,
        "llama_cpp_settings": {
            k: some_test.get(k)
            for k in ("type_k", "type_v", "flash_attn", "n_batch", "n_ubatch")
        },
        "llama_cpp_build": some_test.get("build_commit"),
        "swapless_worker": first["worker"],
        "limits": limits.to_dict(),
        "by_threads": found,
    }
    worker = first["worker"]
    result.notes.append(
        f"Same {s.peers_shape} weights (random, seed {SEED}): llama.cpp Q4_0 "
        f"({made['q4_0_bytes'] / 1e6:.0f} MB GGUF, build {some_test.get('build_commit')}, "
        f"KV {some_test.get('type_k')}, flash attention "
        f"{_FLASH.get(some_test.get('flash_attn'), some_test.get('flash_attn'))}) vs "
        f"Swapless {BITS}-bit g{GROUP} (native kernel: {worker['kernel_reason']}), 16-bit "
        f"KV. Machine limits: read bandwidth {limits.read_bytes_per_s / 1e9:.1f} GB/s, "
        f"fp32 GEMM peak {limits.gemm_flops_per_s / 1e9:.0f} GFLOP/s."
    )
    return result
