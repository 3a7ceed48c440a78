"""Load and pick apart a model folder's ``config.json`` without MLX.

The memory budget must be known before a model is loaded (that is the point: refuse a
model or a context that would push the machine into swap), so everything it needs comes
from ``config.json`` alone. This module owns the file reading and the small, strict
helpers that turn loosely typed JSON values into the integers the budget computes with;
every failure is a `ModelLoadError` naming the folder and the offending key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.core.errors import ModelLoadError
from app.core.files import bounded_read

CONFIG_FILE_NAME = "config.json"

# Bytes per element of the activation dtypes a checkpoint declares. The KV cache is
# written in the dtype the model computes in, which mlx-lm takes from the weights.
DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
}
# Almost every published checkpoint is 16-bit; a config that does not say is assumed so.
DEFAULT_DTYPE_BYTES = 2


def load_config(model_dir: Path) -> dict[str, Any]:
    """Read ``config.json`` from a model folder.

    Args:
        model_dir: The model folder.

    Returns:
        The parsed JSON object.

    Raises:
        ModelLoadError: The folder or its config.json is missing, unreadable, not JSON,
            or not a JSON object.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ModelLoadError(f"Model folder {model_dir} does not exist.")
    path = model_dir / CONFIG_FILE_NAME
    try:
        config = bounded_read.read_json(path, what="The model configuration")
    except FileNotFoundError:
        raise ModelLoadError(
            f"Model folder {model_dir} has no {CONFIG_FILE_NAME}."
        ) from None
    except bounded_read.FileReadError as exc:
        raise ModelLoadError(str(exc)) from exc
    if not isinstance(config, dict):
        raise ModelLoadError(
            f"{path} must hold a JSON object, not {type(config).__name__}."
        )
    return config


def text_config(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Return the language-model part of a config.

    Vision-language checkpoints (Gemma 3, Qwen2-VL, LLaVA, ...) nest the text model in
    ``text_config``; the KV cache belongs to that text model. Keys the text part lacks
    (dtype, quantization) are inherited from the top level, where exporters put them.

    Args:
        config: The whole config.json object.
        source: Where the config came from, for error messages.

    Returns:
        A flat dict describing the text model.

    Raises:
        ModelLoadError: ``text_config`` is present but not an object.
    """
    nested = config.get("text_config")
    if nested is None:
        return dict(config)
    if not isinstance(nested, dict):
        raise ModelLoadError(f"{source}: text_config must be an object.")
    merged = dict(nested)
    for key in ("torch_dtype", "dtype", "quantization", "quantization_config"):
        if key not in merged and key in config:
            merged[key] = config[key]
    merged.setdefault("model_type", config.get("model_type"))
    return merged


def get_int(
    config: dict[str, Any],
    keys: tuple[str, ...],
    source: str,
    default: int | None = None,
    minimum: int = 1,
) -> int:
    """Return the first of ``keys`` present in ``config`` as a checked integer.

    Several architectures spell the same quantity differently (``num_hidden_layers``,
    ``n_layer``, ...), hence the tuple of accepted names.

    Args:
        config: A config dict.
        keys: Accepted names, in order of preference.
        source: Where the config came from, for error messages.
        default: Returned when no key is present; ``None`` makes the key required.
        minimum: Smallest accepted value.

    Returns:
        The integer value.

    Raises:
        ModelLoadError: The key is required and missing, or its value is not an integer
            of at least ``minimum``.
    """
    for key in keys:
        if key in config and config[key] is not None:
            return _checked_int(config[key], key, source, minimum)
    if default is None:
        raise ModelLoadError(f"{source}: config.json has no {' or '.join(keys)}.")
    return default


def get_optional_int(
    config: dict[str, Any], keys: tuple[str, ...], source: str, minimum: int = 1
) -> int | None:
    """Like `get_int`, but ``None`` when no key is present."""
    for key in keys:
        if key in config and config[key] is not None:
            return _checked_int(config[key], key, source, minimum)
    return None


def get_str_list(
    config: dict[str, Any], key: str, length: int, source: str
) -> list[str] | None:
    """Return a per-layer list of strings (such as ``layer_types``), or ``None``.

    Raises:
        ModelLoadError: The value is not a list of ``length`` strings.
    """
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ModelLoadError(f"{source}: {key} must be a list of strings.")
    if len(value) != length:
        raise ModelLoadError(
            f"{source}: {key} has {len(value)} entries but the model has "
            f"{length} layers."
        )
    return value


def get_int_list(config: dict[str, Any], key: str, source: str) -> list[int] | None:
    """Return a list of layer indices (such as ``full_attn_idxs``), or ``None``.

    Raises:
        ModelLoadError: The value is not a list of non-negative integers.
    """
    value = config.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        raise ModelLoadError(f"{source}: {key} must be a list of layer indices.")
    return [_checked_int(v, key, source, minimum=0) for v in value]


def dtype_name(config: dict[str, Any], source: str) -> str | None:
    """Return the declared activation dtype (``torch_dtype`` or ``dtype``), or ``None``.

    transformers 5 writes ``dtype``; older exports write ``torch_dtype``.

    Raises:
        ModelLoadError: The dtype is declared but is not a float dtype we know.
    """
    for key in ("dtype", "torch_dtype"):
        value = config.get(key)
        if value is None:
            continue
        name = str(value).removeprefix("torch.")
        if name not in DTYPE_BYTES:
            raise ModelLoadError(
                f"{source}: unsupported {key} {value!r}; expected one of "
                f"{', '.join(sorted(DTYPE_BYTES))}."
            )
        return name
    return None


def _checked_int(value: Any, key: str, source: str, minimum: int) -> int:
    # bool is an int subclass; `true` as a layer count is a broken config, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ModelLoadError(f"{source}: {key} must be an integer, not {value!r}.")
    if value < minimum:
        raise ModelLoadError(
            f"{source}: {key} must be at least {minimum}, not {value}."
        )
    return value
