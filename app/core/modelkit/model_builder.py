"""Build local models in real mlx-lm format, with random weights, offline.

Swapless is tested and benchmarked against real mlx-lm models, but this machine (and CI)
cannot download one. `build_model` writes a folder that ``mlx_lm.load`` loads unchanged:
``config.json`` for one of the architectures of `arch_configs` (llama and qwen2, and the
sliding-window and hybrid families people run now: Gemma 3/4, gpt-oss, Qwen3, Qwen3.5,
Qwen3-Next, Granite 4.0-H, LFM2), ``model.safetensors`` with random weights
(deterministic from a seed), and a byte-level BPE tokenizer with a ChatML chat template,
trained on local text by `tokenizer_training`. The replies of such a model are noise;
``config.json`` says so under ``swapless_builder`` so the app can tell the user.

Weights are created through the mlx-lm model class of the architecture, so parameter
names are exactly the ones ``mlx_lm.load`` expects, and quantized the way
``mlx_lm.convert`` does (cast to the config's bfloat16, then ``quantize_model`` with group
size 64), so a built folder is indistinguishable in layout from a converted HF model.

Which activation dtype decodes faster on this CPU (2 cores, mlx 0.32.4 CPU backend;
greedy, 128-token prompt, 200 new tokens; tokens/s over two runs). At bits 4 the layers
stay quantized and "fp32" means their scales and biases were upcast:

=====  ====  ==============  ===========  ===========  =========
shape  bits  BLAS            bf16         fp32         fp32/bf16
=====  ====  ==============  ===========  ===========  =========
tiny   16    OpenBLAS        530-817      1186-1204    1.5-2.3x
tiny   16    MLX reference   841-845      946-1002     1.1-1.2x
small  16    OpenBLAS        37.8-37.9    85.9-87.1    2.3x
small  16    MLX reference   38.0-38.5    37.3-42.4    ~1x
tiny   4     OpenBLAS        153-175      634-991      4-6x
small  4     OpenBLAS        4.8-5.2      36.0-39.4    7.5x
=====  ====  ==============  ===========  ===========  =========

Prefill differs more: small at bits 16 prefills 121 tok/s in bf16 and 1330 tok/s in
fp32 with OpenBLAS (60 tok/s in fp32 without it). So on CPU the app should upcast to
float32 (see `backend.adapt_model`); the files stay bfloat16 like a real checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

from app.core.files import private_files
from app.core.modelkit.arch_configs import ARCH_SPECS, ARCHES, architecture_config
from app.core.modelkit.shapes import GROUP_SIZE, SHAPES
from app.core.modelkit.tokenizer_training import (
    ENDOFTEXT,
    IM_END,
    QWEN2_PRETOKENIZE_REGEX,
    QWEN3_5_PRETOKENIZE_REGEX,
    write_tokenizer,
)

ALLOWED_BITS = (4, 8, 16)
__all__ = ["ALLOWED_BITS", "ARCHES", "GROUP_SIZE", "SHAPES", "build_model"]
# GPT-2/Llama-style scale: with unit norms, activations stay finite through 24 layers.
INIT_STD = 0.02
# Uniform, not normal: mx.random.normal costs an erfinv per element and took 4.7 s for
# qwen05's embedding alone against 1.5 s. Noise weights only need the right scale, and
# U(-a, a) has standard deviation a / sqrt(3).
_UNIFORM_BOUND = INIT_STD * 3**0.5
# Real HF checkpoints of these families are bfloat16; mlx_lm.convert keeps that dtype.
WEIGHT_DTYPE = mx.bfloat16
# Recurrent layers (Gated DeltaNet, Mamba-2) decay their state by exp(-exp(A_log) *
# softplus(dt + dt_bias)) per token. Noise-sized values would forget within a token or
# two; these keep a half-life of about 20 tokens, so the state carries the history
# across a message and a wrong state shows in the logits. D = 1 is Mamba's own skip.
_RECURRENT_VALUES = {"A_log": -3.0, "dt_bias": 0.0, "D": 1.0}
_SPLIT_REGEXES = {
    "qwen2": QWEN2_PRETOKENIZE_REGEX,
    "qwen3_5": QWEN3_5_PRETOKENIZE_REGEX,
}


REFERENCE_SHAPE = "reference"
"""The trained reference model (docs/reference-model.md), built by copying it."""


def model_config(shape: str, arch: str | None = None, seed: int = 0) -> dict:
    """Return the unquantized ``config.json`` contents of a shape.

    Args:
        shape: A key of `SHAPES`.
        arch: A key of `arch_configs.ARCH_SPECS`; None for the shape's default.
        seed: Recorded in the ``swapless_builder`` marker.

    Returns:
        A JSON-serializable dict in Hugging Face layout.

    Raises:
        ValueError: If ``shape`` or ``arch`` is unknown.
    """
    if shape not in SHAPES:
        raise ValueError(
            f"unknown model shape {shape!r}; allowed shapes: {', '.join(SHAPES)}"
        )
    geometry = SHAPES[shape]
    arch = geometry.arch if arch is None else arch
    if arch not in ARCH_SPECS:
        raise ValueError(
            f"unknown architecture {arch!r}; allowed architectures: {', '.join(ARCHES)}"
        )
    config = architecture_config(ARCH_SPECS[arch], geometry)
    config["swapless_builder"] = {
        "shape": shape,
        "arch": arch,
        "seed": seed,
        "random_weights": True,
    }
    return config


def _random_parameters(model: nn.Module, seed: int) -> dict:
    """Return a random parameter tree for ``model``, deterministic from ``seed``.

    Norm scales are 1 (every module whose class is a norm, mlx's or a model's own
    gated one); the decay parameters of recurrent layers get `_RECURRENT_VALUES`;
    everything else (weights and biases) is uniform with standard deviation
    `INIT_STD`, drawn in float32 and rounded to bfloat16. Each parameter gets its own
    key, split from the seed in sorted-name order, so a value never depends on how MLX
    schedules the others.
    """
    norms = {
        f"{path}.weight"
        for path, module in model.named_modules()
        if isinstance(module, nn.RMSNorm | nn.LayerNorm)
        or "Norm" in type(module).__name__
    }
    pairs = tree_flatten(model.parameters())
    assert isinstance(pairs, list), "tree_flatten returns a dict only into a dict"
    flat = sorted(pairs, key=lambda item: item[0])
    keys = mx.random.split(mx.random.key(seed), len(flat))
    parameters = []
    for index, (name, value) in enumerate(flat):
        leaf = name.rsplit(".", 1)[-1]
        if name in norms:
            new = mx.ones(value.shape, dtype=WEIGHT_DTYPE)
        elif leaf in _RECURRENT_VALUES:
            new = mx.full(value.shape, _RECURRENT_VALUES[leaf], dtype=WEIGHT_DTYPE)
        else:
            new = mx.random.uniform(
                -_UNIFORM_BOUND, _UNIFORM_BOUND, value.shape, key=keys[index]
            ).astype(WEIGHT_DTYPE)
        parameters.append((name, new))
    return tree_unflatten(parameters)


def _target_folder(folder: Path) -> None:
    """Refuse to overwrite an existing model folder; allow a missing or empty one."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder} already exists and is not an empty folder")


def build_model(
    folder: str | Path,
    shape: str = "tiny",
    bits: int = 16,
    seed: int = 0,
    arch: str | None = None,
) -> Path:
    """Write a random-weight model that ``mlx_lm.load(folder)`` loads unchanged.

    The folder appears complete or not at all: files are written to a temporary
    sibling folder that is renamed at the end.

    Args:
        folder: Where to write the model; must not exist or be empty.
        shape: A key of `SHAPES`, or ``reference`` for a copy of the trained
            reference model (``bits``, ``seed`` and ``arch`` do not apply to it).
        bits: 16 for dense bfloat16 weights, 8 or 4 for weights quantized as
            ``mlx_lm.convert -q`` does (affine, group size 64).
        seed: Seed of the weights; the same seed gives byte-identical weights.
        arch: An architecture of `arch_configs.ARCHES` to override the shape's.

    Returns:
        The model folder.

    Raises:
        ValueError: If ``shape``, ``bits`` or ``arch`` is not an allowed value.
        FileExistsError: If ``folder`` exists and is not empty.
    """
    if bits not in ALLOWED_BITS:
        raise ValueError(
            f"bits must be one of {', '.join(map(str, ALLOWED_BITS))}, got {bits!r}"
        )
    if shape == REFERENCE_SHAPE:
        # Trained, not random: the committed weights (`reference.install`).
        from app.core.modelkit.reference.install import install_reference_model

        return install_reference_model(folder)
    config = model_config(shape, arch, seed)
    folder = Path(folder)
    _target_folder(folder)

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    # The constructor's own initial values are lazy and are replaced before evaluation,
    # so they cost nothing.
    model.update(_random_parameters(model, seed))
    if bits < 16:
        # quantize_model prints a progress line; a library must not write to stdout.
        with contextlib.redirect_stdout(io.StringIO()):
            model, config = quantize_model(model, config, GROUP_SIZE, bits)
    mx.eval(model.parameters())

    private_files.make_private_dir(folder.parent)  # 0700 from the start
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        tokenizer = write_tokenizer(
            staging,
            SHAPES[shape].tokenizer_vocab_size,
            SHAPES[shape].max_position_embeddings,
            _SPLIT_REGEXES[
                ARCH_SPECS[config["swapless_builder"]["arch"]].tokenizer_split
            ],
        )
        config["bos_token_id"] = tokenizer.token_to_id(ENDOFTEXT)
        # mlx_lm.load reads the stop tokens from here as well as from the tokenizer.
        config["eos_token_id"] = tokenizer.token_to_id(IM_END)
        save_model(staging, model)
        save_config(config, staging / "config.json")
        _target_folder(folder)
        if folder.exists():
            folder.rmdir()
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder
