"""The aged_kv plot: quality against KV bytes of aged and uniform caches (`aged_kv`).

Recall on the top row and KL on the bottom, one column per context length, so the
schemes that cost the same bytes can be read off side by side. A length where recall
was not asked (full precision no longer recalls there) says so instead of plotting
zeros.
"""

from __future__ import annotations

from pathlib import Path

from app.bench.parts.aged_kv.aged_kv import NAME


def draw_recall_vs_bytes(results: dict, path: Path) -> bool:
    """Recall (top row) and KL (bottom row) against KV bytes for each scheme, one
    column per length; a length where recall was not asked says so."""
    part = results.get("parts", {}).get(NAME)
    if not part or part.get("status") != "ok":
        return False
    contexts = part["figures"]["contexts"]
    from app.bench.report.pyplot import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(
        2, len(contexts), figsize=(5 * len(contexts), 8), squeeze=False
    )
    for column, (tokens, schemes) in enumerate(contexts.items()):
        recall_ax, kl_ax = axes[0][column], axes[1][column]
        asked = {n: s for n, s in schemes.items() if s["recall"] is not None}
        _scatter(recall_ax, asked, "recall")
        _scatter(kl_ax, schemes, "mean_kl")
        title = f"{int(tokens) // 1024}K tokens"
        if len(asked) < len(schemes):
            full = schemes["full"]
            recall_ax.text(
                0.5,
                0.5,
                "recall not asked: full precision found "
                f"{full['recall_hits']}/{full['recall_asked']} keys\n"
                "(past the reference model's training length)",
                transform=recall_ax.transAxes,
                ha="center",
                fontsize=8,
            )
        recall_ax.set_title(title)
        recall_ax.set_ylabel("pass-key recall")
        recall_ax.set_ylim(-0.05, 1.05)
        kl_ax.set_ylabel("KL vs full precision (last 512 positions)")
        kl_ax.set_yscale("symlog", linthresh=1e-4)
        for ax in (recall_ax, kl_ax):
            ax.set_xscale("log")
            ax.set_xlabel("KV cache (MiB, log)")
            ax.grid(alpha=0.3)
    axes[1][0].legend(fontsize=7, loc="upper right")
    fig.suptitle("Aged vs uniform KV, reference model: quality vs bytes")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


_MARKERS = {
    "reference": ("*", "#2ca02c"),
    "uniform": ("o", "#1f77b4"),
    "equal-bytes": ("s", "#d62728"),
    "equal-bytes-metal": ("D", "#ff7f0e"),
    "example": ("^", "#9467bd"),
}


def _scatter(ax, schemes: dict, field: str) -> None:
    for family, (marker, colour) in _MARKERS.items():
        points = [
            (s["live_bytes"] / 2**20, s[field] or 0.0, name)
            for name, s in schemes.items()
            if s["family"] == family
        ]
        if not points:
            continue
        ax.scatter(
            [p[0] for p in points],
            [p[1] for p in points],
            marker=marker,
            color=colour,
            label=family,
        )
        for x, y, name in points:
            ax.annotate(
                name, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points"
            )
