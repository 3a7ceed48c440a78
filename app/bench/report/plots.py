"""PNG plots of a run, drawn from results.json alone (so they can be redrawn later).

``memory_vs_turns.png``: KV bytes, process RSS and decode speed per turn of the long
conversation, auto-trim on vs off. ``tps_vs_context.png``: decode speed against context
length per KV precision. ``longdoc_memory.png``: decode speed and peak memory of a long
document read whole at 16/4-bit KV and in segments at 4-bit.
``aged_kv_recall_vs_bytes.png``: pass-key recall and KL against KV bytes of aged and
uniform caches (`aged_kv`). A plot whose part did not run is not drawn.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path

from app.bench.report.pyplot import pyplot

MIB = 2**20
COLOURS = {
    "on": "#1f77b4",
    "off": "#d62728",
    "16": "#2ca02c",
    "8": "#1f77b4",
    "4": "#9467bd",
}


def _integer_locator():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _part(results: dict, name: str) -> dict | None:
    part = results.get("parts", {}).get(name)
    return part if part and part.get("status") == "ok" else None


def _caption(results: dict) -> str:
    model = results.get("model", {})
    machine = results.get("machine", {})
    return (
        f"{model.get('shape') or model.get('model_type')} model, "
        f"{machine.get('cpu')} ({machine.get('logical_cores')} cores), "
        f"mlx {machine.get('mlx')} {machine.get('backend')}"
    )


def draw_memory_vs_turns(results: dict, path: Path) -> bool:
    """Draw KV bytes, RSS and decode speed per turn; return False without data."""
    part = _part(results, "long_conversation")
    if part is None:
        return False
    plt = pyplot()
    per_turn = part["figures"]["per_turn"]
    summary = part["figures"]["summary"]
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 8), sharex=True)
    for condition, turns in per_turn.items():
        x = [t["turn"] for t in turns]
        limit = summary[condition]["max_context"]
        label = (
            f"auto-trim on (limit {limit} tokens)"
            if condition == "on"
            else "auto-trim off"
        )
        colour = COLOURS[condition]
        axes[0].plot(x, [t["kv_bytes"] / MIB for t in turns], color=colour, label=label)
        trims = [t for t in turns if t["trimmed"]]
        if trims:
            axes[0].scatter(
                [t["turn"] for t in trims],
                [t["kv_bytes"] / MIB for t in trims],
                color=colour,
                marker="v",
                s=18,
                label="trim",
                zorder=3,
            )
        axes[1].plot(
            x, [t["rss_bytes"] / MIB for t in turns], color=colour, label=label
        )
        axes[2].plot(x, [t["decode_tps"] for t in turns], color=colour, label=label)
    bits = summary["on"]["kv_bits"]
    axes[0].set_ylabel(f"KV cache (MiB, {bits}-bit)")
    axes[1].set_ylabel("process RSS (MiB)")
    axes[2].set_ylabel("decode tok/s")
    axes[2].set_xlabel("turn")
    axes[2].xaxis.set_major_locator(_integer_locator())
    axes[0].set_ylim(bottom=0)
    axes[2].set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"Long conversation: memory per turn\n{_caption(results)}", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def draw_tps_vs_context(results: dict, path: Path) -> bool:
    """Draw decode tok/s against context per KV precision; False without data."""
    part = _part(results, "context_speed")
    if part is None:
        return False
    plt = pyplot()
    figures = part["figures"]
    contexts = figures["contexts"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for bits, cells in figures["by_bits"].items():
        stats = [cells[str(c)]["decode_tps"] for c in contexts]
        medians = [s["median"] for s in stats]
        low = [s["median"] - s["min"] for s in stats]
        high = [s["max"] - s["median"] for s in stats]
        ax.errorbar(
            contexts,
            medians,
            yerr=[low, high],
            marker="o",
            capsize=3,
            color=COLOURS.get(bits),
            label=f"{bits}-bit KV",
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(contexts, [str(c) for c in contexts])
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("decode tok/s (median, min–max)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"Decode speed vs context\n{_caption(results)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def draw_longdoc_memory(results: dict, path: Path) -> bool:
    """Decode speed and MLX peak memory: whole at 16/4-bit vs segments at 4-bit."""
    part = _part(results, "long_document")
    figures = part and part.get("figures", {})
    if not figures or "segmented" not in figures:
        return False
    plt = pyplot()
    fig, axes = plt.subplots(2, 1, figsize=(6.5, 6.5), sharex=True)
    series = []
    for bits, reading in figures["whole"].items():
        points = reading["points"]
        x = [p["context_tokens"] for p in points]
        series.append((f"whole, {bits}-bit KV", COLOURS.get(bits), "s", x, points))
        if reading.get("stopped") and points:
            axes[0].annotate(
                "stopped",
                (x[-1], points[-1]["decode_tokens_per_s"]),
                textcoords="offset points",
                xytext=(4, -10),
                fontsize=7,
            )
    seg = figures["segmented"]
    steps = seg["steps"]
    series.append(
        (
            f"{seg['segments']} segments, {seg['bits']}-bit KV",
            COLOURS["on"],
            "o",
            [p["tokens_read"] for p in steps],
            steps,
        )
    )
    for label, colour, marker, x, points in series:
        axes[0].plot(
            x,
            [p["decode_tokens_per_s"] for p in points],
            marker=marker,
            color=colour,
            label=label,
        )
        axes[1].plot(
            x,
            [p["peak_memory_bytes"] / MIB for p in points],
            marker=marker,
            color=colour,
            label=label,
        )
    axes[0].set_ylabel("decode tok/s")
    axes[1].set_ylabel("MLX peak memory (MiB)")
    axes[1].set_xlabel("context tokens (whole) / document tokens read (segments)")
    for ax in axes:
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(
        f"Long document ({figures['document_tokens']:,} tokens): speed and memory\n"
        f"{_caption(results)}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def _draw_aged_kv(results: dict, path: Path) -> bool:
    from app.bench.parts.aged_kv.aged_kv_plot import draw_recall_vs_bytes

    return draw_recall_vs_bytes(results, path)


def _draw_recall_vs_kv_bytes(results: dict, path: Path) -> bool:
    from app.bench.parts.fidelity import draw_recall_vs_kv_bytes

    return draw_recall_vs_kv_bytes(results, path)


def _draw_trimmed_fact_recall(results: dict, path: Path) -> bool:
    from app.bench.parts.recall.recall import draw_recall_cells

    return draw_recall_cells(results, path)


PLOTS = {
    "memory_vs_turns.png": draw_memory_vs_turns,
    "tps_vs_context.png": draw_tps_vs_context,
    "longdoc_memory.png": draw_longdoc_memory,
    "aged_kv_recall_vs_bytes.png": _draw_aged_kv,
    "recall_vs_kv_bytes.png": _draw_recall_vs_kv_bytes,
    "trimmed_fact_recall.png": _draw_trimmed_fact_recall,
}


def draw_all(results: dict, out_dir: Path, log: Callable[[str], None]) -> list[str]:
    """Draw every plot whose data is in ``results``; return the file names written."""
    try:
        pyplot()
    except ImportError:
        log(
            "matplotlib is missing, so no plots were drawn "
            "(pip install -e '.[bench]' installs it)."
        )
        return []
    written = []
    for name, draw in PLOTS.items():
        try:
            if draw(results, out_dir / name):
                written.append(name)
        except Exception:  # a plot bug must not cost the run; the JSON has the data
            log(f"{name} could not be drawn:\n{traceback.format_exc()}")
    return written
