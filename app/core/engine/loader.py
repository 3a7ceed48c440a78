"""Load a local mlx-lm model folder, or explain in words why it cannot be loaded.

Every failure a user can cause (a wrong folder, a missing or broken config.json, an
architecture mlx-lm does not know, missing or corrupt weights, a broken tokenizer) becomes
a `ModelLoadError` that names the folder and what is wrong.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.nn as nn

from app.core.budget.weights_check import check_layers_present, shorten
from app.core.engine.cpu import backend
from app.core.engine.events import ModelInfo
from app.core.errors import ModelLoadError
from app.core.files import bounded_read
from app.core.models.model_identity import model_identity  # re-exported for the engine

# A module name under mlx_lm.models: nothing that could reach outside it.
_MODEL_TYPE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass
class LoadedModel:
    """A model ready to generate on this backend (engine-internal, holds MLX objects)."""

    model: nn.Module
    tokenizer: Any
    config: dict
    info: ModelInfo


def read_config(folder: Path) -> dict:
    """Read and check a model folder's config.json.

    Args:
        folder: The model folder.

    Returns:
        The parsed config.

    Raises:
        ModelLoadError: If the folder or config.json is missing or unreadable.
    """
    if not folder.exists():
        raise ModelLoadError(f"Model folder {folder} does not exist.")
    if not folder.is_dir():
        raise ModelLoadError(f"{folder} is a file, not a model folder.")
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(
            f"Model folder {folder} has no config.json; it is not an mlx-lm model folder."
        )
    try:
        config = bounded_read.read_json(config_path, what="The model configuration")
    except (FileNotFoundError, bounded_read.FileReadError) as exc:
        raise ModelLoadError(f"{exc}") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"config.json in {folder} does not name a model_type.")
    model_type = config["model_type"]
    if not isinstance(model_type, str) or not _MODEL_TYPE.match(model_type):
        raise ModelLoadError(
            f"config.json in {folder} has an invalid model_type "
            f"{shorten(repr(model_type), 60)}."
        )
    return config


def _check_architecture(folder: Path, config: dict) -> None:
    """Refuse a model_type mlx-lm has no model class for.

    mlx-lm imports ``mlx_lm.models.<model_type>``, and some of those modules are
    helpers, not models (``cache``, ``base``): they import fine and have no ``Model``.
    """
    from mlx_lm.utils import _get_classes

    try:
        model_class, args_class = _get_classes(config)
        usable = isinstance(model_class, type) and isinstance(args_class, type)
    except Exception:  # ValueError for unknown types, AttributeError for helpers
        usable = False
    if not usable:
        raise ModelLoadError(
            f"Model folder {folder}: architecture {config.get('model_type')!r} is not "
            "supported by the installed mlx-lm."
        )


def load_model_folder(folder: str | Path) -> LoadedModel:
    """Load a model folder and adapt it to this backend.

    Args:
        folder: A local folder in mlx-lm format.

    Returns:
        The loaded model, tokenizer, config and a `ModelInfo`.

    Raises:
        ModelLoadError: If the folder is not a loadable model.
    """
    folder = Path(folder).expanduser().resolve()
    config = read_config(folder)
    _check_architecture(folder, config)
    if not list(folder.glob("*.safetensors")):
        raise ModelLoadError(f"Model folder {folder} has no .safetensors weight files.")
    if (
        not (folder / "tokenizer.json").is_file()
        and not (folder / "tokenizer.model").is_file()
    ):
        raise ModelLoadError(
            f"Model folder {folder} has no tokenizer (tokenizer.json)."
        )

    # Before mlx-lm builds anything: it instantiates every declared layer first.
    check_layers_present(folder, config)

    from mlx_lm.utils import load_model, load_tokenizer

    started = time.perf_counter()
    try:
        model, config = load_model(folder)
    except Exception as exc:  # mlx-lm raises many kinds for bad weight files
        raise ModelLoadError(
            f"Weights in {folder} cannot be loaded "
            f"({type(exc).__name__}: {shorten(str(exc))})."
        ) from exc
    try:
        tokenizer = load_tokenizer(folder, eos_token_ids=config.get("eos_token_id"))
    except Exception as exc:
        raise ModelLoadError(
            f"Tokenizer in {folder} cannot be loaded "
            f"({type(exc).__name__}: {shorten(str(exc))})."
        ) from exc
    if not tokenizer.has_chat_template:
        raise ModelLoadError(
            f"Model folder {folder} has no chat template, so it cannot be used for chat."
        )
    model = backend.adapt_model(model)
    quantization = config.get("quantization") or config.get("quantization_config") or {}
    info = ModelInfo(
        folder=str(folder),
        identity=model_identity(folder, config),
        model_type=str(config.get("model_type")),
        num_layers=len(getattr(model, "layers", [])),
        weights_bytes=backend.parameter_bytes(model),
        weights_bits=int(quantization.get("bits", 16))
        if isinstance(quantization, dict)
        else 16,
        activation_dtype=backend.activation_dtype_name(model),
        random_weights=bool(
            config.get("swapless_builder", {}).get("random_weights", False)
        ),
        load_seconds=time.perf_counter() - started,
        kv_dtype=backend.kv_dtype_name(model),
    )
    return LoadedModel(model=model, tokenizer=tokenizer, config=config, info=info)


def model_unchanged(folder: str, identity: str) -> bool:
    """True when ``folder`` still holds the model whose identity is ``identity``."""
    path = Path(folder)
    if not path.is_dir():
        return False
    try:
        return model_identity(path, read_config(path)) == identity
    except ModelLoadError:
        return False
