"""Refuse a config.json that cannot describe the weights next to it, before building it.

mlx-lm builds the whole model from config.json before it looks at the weights, so a
config claiming a million layers over a few megabytes of tensors builds a million
layers: 21.6 GB of RSS until the out-of-memory killer struck, and with ten thousand
layers a 3.8 MB error listing every missing parameter. The safetensors headers list
every tensor by name, so comparing the declared layer count with the layers present
costs a few kilobytes of reading. No MLX here.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.core.budget.model_config import text_config
from app.core.budget.weights import read_header
from app.core.errors import ModelLoadError

# "model.layers.12.self_attn...", "transformer.h.3.mlp...", "backbone.blocks.0...".
_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)\.")
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
MAX_MESSAGE_CHARS = 300
"""Longest library error text quoted in a message (mlx-lm lists every parameter)."""


def check_layers_present(folder: Path, config: dict) -> None:
    """Refuse a config declaring more decoder layers than the weights hold.

    Weights with more layers than declared are left to mlx-lm: some checkpoints carry
    extra layers (multi-token prediction) that the model drops when loading.

    Args:
        folder: The model folder.
        config: Its parsed config.json.

    Raises:
        ModelLoadError: The declared layer count is not a sane whole number, or is
            larger than the number of layers in the weights.
    """
    declared = _declared_layers(folder, config)
    if declared is None:
        return
    present = layers_in_weights(folder)
    if present is None:
        return  # tensors named in a way we do not know: mlx-lm will judge
    if declared > present:
        raise ModelLoadError(
            f"Model folder {folder}: config.json declares {declared:,} layers but the "
            f"weights hold only {present:,}; the config does not belong to these "
            "weights, or weight files are missing."
        )


def layers_in_weights(folder: Path) -> int | None:
    """Return how many numbered layers the safetensors headers name, or None if none.

    Raises:
        ModelLoadError: A weight file is unreadable or its header is corrupt.
    """
    highest = -1
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            header, _ = read_header(path)
        except ModelLoadError as exc:
            raise ModelLoadError(
                f"Weights in {folder} cannot be loaded ({shorten(str(exc))})"
            ) from exc
        for name in header:
            for match in _LAYER_INDEX.finditer(name):
                highest = max(highest, int(match.group(1)))
    return highest + 1 if highest >= 0 else None


def _declared_layers(folder: Path, config: dict) -> int | None:
    text = text_config(config, str(folder / "config.json"))
    for key in _LAYER_KEYS:
        if key in text:
            value = text[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ModelLoadError(
                    f"Model folder {folder}: config.json {key} must be a whole number "
                    f"of at least 1, not {shorten(repr(value), 40)}."
                )
            return value
    return None


def shorten(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """Return the first line of ``text``, cut to ``limit`` characters."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
