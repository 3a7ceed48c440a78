"""The demo model: a tiny random-weight model built on first use.

It lets a new user see Swapless work end to end before pointing it at a real model. Its
replies are noise; callers say so plainly.

Building it trains a tokenizer and takes seconds (5.7 s measured on a busy 2-core
machine), so a home builds it once, and `copy_demo_model` lets a run in a throw-away
home (the smoke test) start from an already-built copy instead of building again.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from app.core.files import paths, private_files

DEMO_NOTICE = (
    "Using the demo model: a tiny model with random weights built on this machine, so its "
    "replies are noise. Point Swapless at a real mlx-lm model folder with --model DIR "
    "(on a Mac, e.g. a folder converted with mlx_lm.convert or downloaded from "
    "mlx-community)."
)


def is_complete(folder: Path) -> bool:
    """True when ``folder`` holds a config and weights (builds are atomic renames)."""
    return (folder / "config.json").is_file() and bool(
        list(folder.glob("*.safetensors"))
    )


def ensure_demo_model() -> Path:
    """Return the demo model folder, building it first if it is missing or incomplete."""
    folder = paths.demo_model_dir()
    if not is_complete(folder):
        from app.core.modelkit.model_builder import build_model

        build_model(folder, shape="tiny", bits=16, seed=0)
    return folder


def copy_demo_model(source: Path, target: Path) -> bool:
    """Copy a built demo model to ``target`` when ``target`` has none.

    The copy appears complete or not at all (a temporary sibling renamed at the end), so
    a reader never sees half a model.

    Args:
        source: A demo model folder, complete or not.
        target: Where the demo model should be.

    Returns:
        True when ``target`` was filled from ``source``; False when ``source`` is
        incomplete, ``target`` already has a model, or the copy failed.
    """
    if source == target or not is_complete(source) or is_complete(target):
        return False
    private_files.make_private_dir(target.parent)  # 0700 from the start
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for item in source.iterdir():
            if item.is_file():
                shutil.copy2(item, staging / item.name)
        if target.exists():
            target.rmdir()  # only an empty leftover; a non-empty one raises OSError
        os.replace(staging, target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    return True
