"""Draw the reference model's training loss curve from its ``training_log.json``.

matplotlib is the ``bench`` extra; without it no picture is drawn and nothing fails.
"""

from __future__ import annotations

import json
from pathlib import Path


def draw_loss_curve(
    log_path: Path, png_path: Path, held_out: dict | None = None
) -> bool:
    """Plot loss per step (and a 20-step running mean); return False without matplotlib.

    Args:
        log_path: A ``training_log.json`` written by `install.write_training_log`.
        png_path: Where to write the PNG.
        held_out: Optional held-out figures (`Evaluation.as_dict`) for the caption.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    data = json.loads(Path(log_path).read_text(encoding="utf-8"))
    columns = data["columns"]
    steps = [row[columns.index("step")] for row in data["steps"]]
    losses = [row[columns.index("loss")] for row in data["steps"]]
    tokens = [row[columns.index("tokens")] for row in data["steps"]]
    window = 20
    smooth = [
        sum(losses[max(0, i - window + 1) : i + 1])
        / len(losses[max(0, i - window + 1) : i + 1])
        for i in range(len(losses))
    ]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, color="#9ecae1", linewidth=0.8, label="batch loss")
    ax.plot(steps, smooth, color="#1f77b4", linewidth=1.6, label=f"{window}-step mean")
    # A stage starts where the tokens per step change (sequence length and batch).
    per_step = [b - a for a, b in zip([0, *tokens[:-1]], tokens, strict=True)]
    for index in range(1, len(per_step)):
        if per_step[index] != per_step[index - 1]:
            ax.axvline(steps[index], color="#888888", linestyle=":", linewidth=1)
            ax.annotate(
                f" {per_step[index]:,} tokens/step from here",
                (steps[index], max(losses) * 0.95),
                fontsize=8,
                color="#555555",
            )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats / token)")
    title = (
        f"Reference model training: {tokens[-1]:,} tokens in "
        f"{data['seconds'] / 60:.0f} min"
    )
    if held_out:
        title += (
            f"\nheld-out perplexity {held_out['perplexity']:.1f} "
            f"(unigram {held_out['unigram_perplexity']:.0f})"
        )
    ax.set_title(title, fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return True
