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

SAMPLES_PER_FILE = 16
SAMPLE_BYTES = 64 * 1024
HEADER_LENGTH_BYTES = 8
MAX_HEADER_BYTES = 100 * 2**20
"""safetensors caps its JSON header at 100 MB; a longer one is not read whole."""


def model_identity(folder: Path, config: dict) -> str:
    """Return a stable identity of a model folder's contents, wherever the folder is.

    Hashed: the config, and per weight file its name, size, safetensors header (every
    tensor's name, dtype, shape and offsets) and `SAMPLES_PER_FILE` slices of its bytes
    spread over the file. A byte-identical copy in another folder (or with another
    modification time) is the same model, so its quality results show there too; new
    weights of the same shape change the sampled bytes. Cheap: about a megabyte is read
    per weight file, however large.
    """
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    for weights in sorted(Path(folder).glob("*.safetensors")):
        size = weights.stat().st_size
        digest.update(f"{weights.name}:{size}".encode())
        with open(weights, "rb") as file:
            head = file.read(HEADER_LENGTH_BYTES)
            digest.update(head)
            if len(head) == HEADER_LENGTH_BYTES:
                header = int.from_bytes(head, "little")
                digest.update(file.read(min(header, MAX_HEADER_BYTES)))
            for index in range(SAMPLES_PER_FILE):
                file.seek(size * index // SAMPLES_PER_FILE)
                digest.update(file.read(SAMPLE_BYTES))
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
