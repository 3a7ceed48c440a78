"""The demo model: a tiny random-weight model built on first use.

It lets a new user see Swapless work end to end before pointing it at a real model. Its
replies are noise; callers say so plainly.
"""

from __future__ import annotations

from pathlib import Path

from app.core import paths

DEMO_NOTICE = (
    "Using the demo model: a tiny model with random weights built on this machine, so its "
    "replies are noise. Point Swapless at a real mlx-lm model folder with --model DIR "
    "(on a Mac, e.g. a folder converted with mlx_lm.convert or downloaded from "
    "mlx-community)."
)


def ensure_demo_model() -> Path:
    """Return the demo model folder, building it first if it is missing or incomplete."""
    folder = paths.demo_model_dir()
    if not (folder / "config.json").is_file() or not list(folder.glob("*.safetensors")):
        from app.core.engine.model_builder import build_model

        build_model(folder, shape="tiny", bits=16, seed=0)
    return folder
