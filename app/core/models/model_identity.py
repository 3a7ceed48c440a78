"""A model folder's identity, computed without MLX.

The engine keys caches by it, and quality results are stored under it; the doctor must
find those results before any model is loaded, so the identity cannot live in the
MLX-importing loader.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from app.core.files import bounded_read


def model_identity(folder: Path, config: dict) -> str:
    """Return a stable identity of a model folder's exact contents.

    The config and each weight file's name, size and modification time are hashed:
    cheap (no weights are read) yet changes whenever the weights are replaced.
    """
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for weights in sorted(Path(folder).glob("*.safetensors")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:32]


def folder_identity(folder: Path) -> str | None:
    """The identity of the model in ``folder``, or None if its config is unreadable."""
    try:
        config = bounded_read.read_json(
            Path(folder) / "config.json", what="The model configuration"
        )
    except (OSError, bounded_read.FileReadError):
        return None
    return model_identity(Path(folder), config) if isinstance(config, dict) else None
