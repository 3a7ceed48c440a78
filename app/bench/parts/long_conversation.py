"""A long scripted conversation with auto-trim on and off: memory and speed per turn.

Both conditions use the ``chat`` preset with extractive summaries (the model has random
weights), greedy replies of the same length and the same user messages; "off" sets
max_context so high that it never trims. Each runs in its own worker process
(`conversation_worker`) so process memory is its own, and the turns are interleaved:
on turn 1, off turn 1, on turn 2, … Per turn: KV bytes and tokens of the live cache,
process RSS (current and peak), MLX active memory and the turn's MLX peak, decode
speed and time to first token.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.parts.conversation_worker import MARKER
from app.bench.results import PartResult, Row
from app.bench.worker_process import WorkerProcess
from app.core.presets.presets import MAX_CONTEXT

NAME = "long_conversation"
TITLE = "Long conversation: auto-trim on vs off"
USER_TOKENS = 24
CONDITIONS = ("on", "off")


def available(ctx: BenchContext) -> str | None:
    """Available from a source checkout (it starts worker processes with ``-m``)."""
    if getattr(sys, "frozen", False):
        return "needs a source checkout: a frozen app cannot start Python workers"
    return None


def _worker(name: str, config: dict, log_path: Path, home: Path) -> WorkerProcess:
    return WorkerProcess(
        "app.bench.parts.conversation_worker",
        config,
        marker=MARKER,
        log_path=log_path,
        # Its own app home: the worker's engine must not touch the user's prefix cache.
        env=dict(os.environ, SWAPLESS_HOME=str(home)),
        name=name,
        quit_timeout=30,
    )


def user_message(ctx: BenchContext, turn: int) -> str:
    """The scripted user message of a turn (same for both conditions)."""
    return (
        f"Turn {turn}: please remember that item {turn} costs {turn * 3} euros. "
        + ctx.filler(USER_TOKENS, seed=100 + turn)
    )


def run(ctx: BenchContext) -> PartResult:
    """Run both conversations interleaved and collect their per-turn figures."""
    s = ctx.settings
    scratch = Path(ctx.scratch or ctx.out_dir)
    scratch.mkdir(parents=True, exist_ok=True)
    limits = {"on": s.conversation_max_context, "off": MAX_CONTEXT}
    workers: dict[str, WorkerProcess] = {}
    turns: dict[str, list] = {c: [] for c in CONDITIONS}
    try:
        for condition in CONDITIONS:
            db = scratch / f"long-conversation-{condition}.db"
            db.unlink(missing_ok=True)
            config = {
                "model": str(ctx.model_dir),
                "db": str(db),
                "max_context": limits[condition],
                "max_tokens": s.conversation_max_tokens,
            }
            workers[condition] = _worker(
                condition,
                config,
                scratch / f"long-conversation-{condition}.log",
                scratch / f"home-{condition}",
            )
        for turn in range(1, s.conversation_turns + 1):
            text = user_message(ctx, turn)
            for condition in CONDITIONS:
                turns[condition].append(
                    workers[condition].ask(op="turn", turn=turn, text=text)
                )
            if turn % 10 == 0:
                ctx.log(
                    f"  turn {turn}: KV on {turns['on'][-1]['kv_bytes'] / 2**20:.2f} MiB, "
                    f"off {turns['off'][-1]['kv_bytes'] / 2**20:.2f} MiB"
                )
    finally:
        for worker in workers.values():
            worker.close()
    return _result(ctx, workers, turns, limits)


def _tail_median(values: list[float], count: int = 10) -> float:
    return statistics.median(values[-count:])


def _result(ctx, workers, turns, limits) -> PartResult:
    s = ctx.settings
    summary = {}
    for condition in CONDITIONS:
        rows = turns[condition]
        summary[condition] = {
            "max_context": limits[condition],
            "kv_bits": workers[condition].ready["kv_bits"],
            "load_s": workers[condition].ready["load_s"],
            "trims": sum(1 for t in rows if t["trimmed"]),
            "trim_methods": sorted({t["trim_method"] for t in rows if t["trimmed"]}),
            "final_context_tokens": rows[-1]["context_tokens"],
            "final_kv_bytes": rows[-1]["kv_bytes"],
            "max_kv_bytes": max(t["kv_bytes"] for t in rows),
            "final_rss_bytes": rows[-1]["rss_bytes"],
            "peak_rss_bytes": max(t["peak_rss_bytes"] for t in rows),
            "rss_growth_bytes": rows[-1]["rss_bytes"] - rows[0]["rss_bytes"],
            "final_mlx_active_bytes": rows[-1]["mlx_active_bytes"],
            "max_mlx_turn_peak_bytes": max(t["mlx_turn_peak_bytes"] for t in rows),
            "decode_tps_last10_median": _tail_median([t["decode_tps"] for t in rows]),
            "decode_tps_first10_median": statistics.median(
                [t["decode_tps"] for t in rows[:10]]
            ),
            "ttft_s_last10_median": _tail_median([t["ttft_s"] for t in rows]),
            "max_trim_ms": max(
                (t["trim_ms"] for t in rows if t["trimmed"]), default=0.0
            ),
            "total_wall_s": sum(t["wall_s"] for t in rows),
        }
    on, off = summary["on"], summary["off"]
    result = PartResult()
    result.figures = {
        "turns": s.conversation_turns,
        "reply_tokens": s.conversation_max_tokens,
        "user_message_tokens": USER_TOKENS,
        "summary": summary,
        "per_turn": turns,
    }
    result.ratios["long_conversation_final_kv_on_vs_off"] = (
        on["final_kv_bytes"] / off["final_kv_bytes"]
    )
    result.ratios["long_conversation_tps_on_vs_off_last10"] = (
        on["decode_tps_last10_median"] / off["decode_tps_last10_median"]
    )
    mib = 2**20
    n = s.conversation_turns
    result.rows = [
        Row(
            f"{n} turns, KV at the end: trim on (limit {on['max_context']}) / off",
            f"{on['final_kv_bytes'] / mib:.2f} MiB ({on['final_context_tokens']} tok) / "
            f"{off['final_kv_bytes'] / mib:.2f} MiB ({off['final_context_tokens']} tok)",
        ),
        Row(
            f"{n} turns, trims on / off; longest trim (on)",
            f"{on['trims']} / {off['trims']}; {on['max_trim_ms']:.0f} ms",
        ),
        Row(
            f"{n} turns, process RSS growth from turn 1: on / off",
            f"{on['rss_growth_bytes'] / mib:+.1f} MiB / {off['rss_growth_bytes'] / mib:+.1f} MiB",
        ),
        Row(
            f"{n} turns, decode tok/s over the last 10 turns: on / off",
            f"{on['decode_tps_last10_median']:.1f} / {off['decode_tps_last10_median']:.1f}",
        ),
    ]
    return result
