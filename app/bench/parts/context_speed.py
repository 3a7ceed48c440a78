"""Prefill, warm-turn and decode speed against context length at 16-, 8- and 4-bit KV.

At each context length one cache per precision holds the same prompt (quantized from
the first token, as the app stores it), and the precisions run interleaved: 16, 8, 4,
16, 8, 4, … Each repetition is a warm turn: the cache is cut back to the context, a
prompt of `speed_warm_tokens` more tokens is prefilled on top of it and a fixed number
of greedy tokens is decoded. Reported per cell:

- prefill: tokens per second filling the cache from the previous context length (from
  empty for the first), and as a fraction of the GEMM peak (matmul and attention FLOPs
  per second ÷ `limits`);
- warm turn: time to the first token of that turn;
- decode: the engine's own tokens/s, as the app shows it, and as a fraction of the read
  bandwidth (weights read per token + the KV cache held, × tokens/s ÷ `limits`).

The quantized-vs-unquantized ratios (speed at 8 or 4 bits ÷ speed at 16 bits, so 1.0
is "as fast") are medians of the per-repetition pairs. The decode ratios at 4K and
longer carry their own target (`DECODE_KEY`, issue 32: ≥ 0.9), with the KV bytes per
token each precision really held and whether the native KV kernel read the cache
(`engine.cpu.kv_kernel`; without it 16-bit KV is widened by MLX and quantized KV goes
through the integer-through-BLAS products).
"""

from __future__ import annotations

from app.bench.context import BenchContext, greedy, kv_settings
from app.bench.parts import limits as machine_limits
from app.bench.results import PartResult, Row
from app.bench.settings import KV_BITS, TARGETS
from app.bench.stats import summarize

NAME = "context_speed"
TITLE = "Prefill, warm-turn and decode speed vs context length"
DECODE_KEY = "kv_decode_vs_16bit"
"""Decode tok/s at 8 and 4 bits ÷ at 16 bits, per context of at least `DECODE_FROM`."""
DECODE_FROM = 4096
"""Contexts the decode target covers (all of them when none is this long: smoke runs)."""


def available(ctx: BenchContext) -> str | None:
    """Always available."""
    return None


def model_costs(ctx: BenchContext) -> dict:
    """Matmul weights and attention geometry of the loaded model (on the engine thread).

    Returns:
        ``matmul_parameters`` (every linear layer, and the embedding when it doubles as
        the output layer), their bytes, and ``layers``/``heads``/``head_dim``.
    """

    model = ctx.loaded_model().model

    def read() -> dict:
        import mlx.nn as nn

        parameters = weight_bytes = 0
        for _, module in model.named_modules():
            if isinstance(module, nn.Linear):
                parameters += module.weight.size
                weight_bytes += module.weight.nbytes
        inner = getattr(model, "model", None)
        embedding = getattr(inner, "embed_tokens", None)
        if not hasattr(model, "lm_head") and embedding is not None:
            parameters += embedding.weight.size  # tied: the embedding is the lm_head
            weight_bytes += embedding.weight.nbytes
        attention = model.layers[0].self_attn
        heads = int(attention.n_heads)
        return {
            "matmul_parameters": int(parameters),
            "matmul_weight_bytes": int(weight_bytes),
            "layers": len(model.layers),
            "heads": heads,
            # qwen2 keeps no head_dim attribute; the query projection has the width.
            "head_dim": int(attention.q_proj.weight.shape[0]) // heads,
        }

    return ctx.engine.submit(read).result()


def prefill_flops(costs: dict, start: int, end: int) -> float:
    """FLOPs of prefilling positions ``[start, end)``: matmuls plus attention.

    Each token costs 2 FLOPs per matmul parameter; its attention costs 4 per layer, head
    and head dimension for every key it sees (QK^T and PV), itself included.
    """
    tokens = end - start
    seen = (start + 1 + end) * tokens / 2  # keys seen, summed over the new tokens
    attention = 4 * costs["layers"] * costs["heads"] * costs["head_dim"] * seen
    return 2 * costs["matmul_parameters"] * tokens + attention


def run(ctx: BenchContext) -> PartResult:
    """Measure prefill, warm turns and decoding at each context length and precision."""
    s = ctx.settings
    engine = ctx.engine
    limits = machine_limits.for_run(ctx)
    costs = model_costs(ctx)
    contexts = sorted(s.speed_contexts)
    warm = s.speed_warm_tokens
    ids = ctx.prompt_ids(contexts[-1] + warm, seed=4)
    keys = {bits: f"bench-speed-{bits}" for bits in KV_BITS}
    for key in keys.values():
        engine.drop_cache(key)
    # The first calls at a precision compile kernels; keep that out of every figure.
    for bits in KV_BITS:
        engine.prefill(keys[bits], ids[: min(contexts[0], 600)], kv_settings(bits))
        engine.drop_cache(keys[bits])
    table: dict[str, dict[str, dict]] = {str(b): {} for b in KV_BITS}
    ratios: dict[str, dict[str, dict]] = {}
    previous = 0
    try:
        for context in contexts:
            prefill = {
                bits: engine.prefill(keys[bits], ids[:context], kv_settings(bits))
                for bits in KV_BITS
            }
            decode: dict[int, list] = {bits: [] for bits in KV_BITS}
            ttft: dict[int, list] = {bits: [] for bits in KV_BITS}
            for _ in range(s.speed_reps):
                for bits in KV_BITS:
                    kv = kv_settings(bits)
                    engine.prefill(keys[bits], ids[:context], kv)  # cut back
                    final = engine.generate(
                        keys[bits],
                        ids[: context + warm],
                        kv,
                        greedy(s.speed_decode_tokens),
                    ).wait()
                    if final.kv_bits != bits:
                        raise RuntimeError(
                            f"the {bits}-bit run decoded from a {final.kv_bits}-bit cache"
                        )
                    decode[bits].append(final.tokens_per_s)
                    ttft[bits].append(final.ttft_s)
            flops = prefill_flops(costs, previous, context)
            for bits in KV_BITS:
                report = prefill[bits]
                tps = summarize(decode[bits])
                moved = costs["matmul_weight_bytes"] + report.kv_bytes
                table[str(bits)][str(context)] = {
                    "decode_tps": tps,
                    "warm_ttft_s": summarize(ttft[bits]),
                    "prefill_s": report.seconds,
                    "prefilled_tokens": report.computed_tokens,
                    "prefill_tps": report.computed_tokens / report.seconds,
                    "prefill_fraction_of_gemm_peak": flops
                    / report.seconds
                    / limits.gemm_flops_per_s,
                    "kv_bytes": report.kv_bytes,
                    "decode_bytes_per_token": moved,
                    "decode_fraction_of_bandwidth": moved
                    * tps["median"]
                    / limits.read_bytes_per_s,
                }
            ratios[str(context)] = _ratios(prefill, decode, ttft)
            ctx.log(
                f"  {context} tokens: "
                + ", ".join(
                    f"{b}-bit decode {table[str(b)][str(context)]['decode_tps']['median']:.1f}"
                    f" tok/s, prefill {table[str(b)][str(context)]['prefill_tps']:.0f} tok/s"
                    for b in KV_BITS
                )
            )
            previous = context
    finally:
        for key in keys.values():
            engine.drop_cache(key)
    result = _result(s, contexts, table, ratios, costs, limits)
    _decode_target(result, contexts, table, ratios, _kv_kernel_state(ctx))
    return result


def _kv_kernel_state(ctx: BenchContext) -> str:
    """Whether the native KV kernel read the caches, as one line."""

    def read() -> str:
        from app.core.engine.cpu import backend

        if backend.uses_metal():
            return "not used (Metal)"
        from app.core.engine.cpu import kv_kernel

        return kv_kernel.state().reason

    return ctx.engine.submit(read).result()


def _decode_target(
    result: PartResult, contexts, table: dict, ratios: dict, kernel: str
) -> None:
    """The decode-only ratios at long contexts, their target, and the bytes held."""
    target = TARGETS[DECODE_KEY]
    covered = [c for c in contexts if c >= DECODE_FROM] or list(contexts)
    by_context = {
        str(c): {
            str(bits): ratios[str(c)][str(bits)]["decode"]["median"]
            for bits in KV_BITS[1:]
        }
        for c in covered
    }
    held = all(target.holds(r) for cell in by_context.values() for r in cell.values())
    result.ratios[DECODE_KEY] = by_context
    result.targets_met[DECODE_KEY] = held
    longest = str(contexts[-1])
    result.figures["kv_bytes_per_token_at_longest"] = {
        str(bits): table[str(bits)][longest]["kv_bytes"] / contexts[-1]
        for bits in KV_BITS
    }
    result.figures["kv_kernel"] = kernel
    names = " / ".join(_k(c) for c in covered)
    result.rows.append(
        Row(
            f"8-bit / 4-bit ÷ 16-bit KV decode tok/s at {names} (KV kernel: {kernel})",
            " · ".join(
                f"{cell['8']:.2f} / {cell['4']:.2f}" for cell in by_context.values()
            ),
            target=target.text(),
            held="yes" if held else "no",
        )
    )


def _ratios(prefill: dict, decode: dict, ttft: dict) -> dict:
    """Quantized speed ÷ 16-bit speed for prefill, warm turn and decode, per precision."""
    out = {}
    for bits in KV_BITS[1:]:
        pairs_decode = [q / f for q, f in zip(decode[bits], decode[16], strict=True)]
        pairs_warm = [f / q for q, f in zip(ttft[bits], ttft[16], strict=True)]
        out[str(bits)] = {
            "prefill": prefill[16].seconds / prefill[bits].seconds,
            "warm_turn": summarize(pairs_warm),
            "decode": summarize(pairs_decode),
        }
    return out


def _result(s, contexts, table, ratios, costs, limits) -> PartResult:
    result = PartResult()
    result.figures = {
        "contexts": contexts,
        "decode_tokens": s.speed_decode_tokens,
        "warm_tokens": s.speed_warm_tokens,
        "model_costs": costs,
        "limits": limits.to_dict(),
        "by_bits": table,
        "quantized_vs_16bit": ratios,
    }
    names = " / ".join(_k(c) for c in contexts)
    for bits in KV_BITS:
        cells = [table[str(bits)][str(c)] for c in contexts]
        result.rows.append(
            Row(
                f"Decode tok/s at {names} context, {bits}-bit KV (fraction of read "
                "bandwidth)",
                " / ".join(
                    f"{c['decode_tps']['median']:.1f} ({c['decode_fraction_of_bandwidth']:.2f})"
                    for c in cells
                ),
                " / ".join(
                    f"{c['decode_tps']['min']:.0f}–{c['decode_tps']['max']:.0f}"
                    for c in cells
                )
                + f" (n={cells[0]['decode_tps']['n']})",
            )
        )
    for bits in KV_BITS:
        cells = [table[str(bits)][str(c)] for c in contexts]
        result.rows.append(
            Row(
                f"Prefill tok/s up to {names}, {bits}-bit KV (fraction of GEMM peak)",
                " / ".join(
                    f"{c['prefill_tps']:.0f} ({c['prefill_fraction_of_gemm_peak']:.2f})"
                    for c in cells
                ),
            )
        )
    for bits in KV_BITS:
        cells = [table[str(bits)][str(c)]["warm_ttft_s"] for c in contexts]
        result.rows.append(
            Row(
                f"Warm turn ({s.speed_warm_tokens} new tokens) TTFT at {names}, "
                f"{bits}-bit KV",
                " / ".join(f"{c['median']:.2f} s" for c in cells),
                " / ".join(f"{c['min']:.2f}–{c['max']:.2f}" for c in cells)
                + f" (n={cells[0]['n']})",
            )
        )
    for bits in KV_BITS[1:]:
        cells = [ratios[str(c)][str(bits)] for c in contexts]
        result.rows.append(
            Row(
                f"{bits}-bit ÷ 16-bit KV speed at {names}: prefill / warm turn / decode",
                " · ".join(
                    f"{c['prefill']:.2f} / {c['warm_turn']['median']:.2f} / "
                    f"{c['decode']['median']:.2f}"
                    for c in cells
                ),
                target="≥ 0.9",
                held="yes"
                if all(
                    min(c["prefill"], c["warm_turn"]["median"], c["decode"]["median"])
                    >= 0.9
                    for c in cells
                )
                else "no",
            )
        )
    longest = str(contexts[-1])
    base = table["16"][longest]["decode_tps"]["median"]
    result.ratios["decode_tps_vs_16bit_at_longest_context"] = {
        str(b): table[str(b)][longest]["decode_tps"]["median"] / base for b in KV_BITS
    }
    result.ratios["quantized_vs_16bit_speed"] = {
        context: {
            bits: {
                "prefill": cell["prefill"],
                "warm_turn": cell["warm_turn"]["median"],
                "decode": cell["decode"]["median"],
            }
            for bits, cell in by_bits.items()
        }
        for context, by_bits in ratios.items()
    }
    first, last = str(contexts[0]), str(contexts[-1])
    result.ratios["prefill_tps_longest_vs_shortest_context"] = (
        table["16"][last]["prefill_tps"] / table["16"][first]["prefill_tps"]
    )
    return result


def _k(tokens: int) -> str:
    return f"{tokens // 1024}K" if tokens % 1024 == 0 else str(tokens)
