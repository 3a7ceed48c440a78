"""Put the reference model in a folder: the committed weights, or freshly trained ones.

The committed folder (``resources/quality/reference-model``) is what tests, benchmarks
and ``swapless make-model DIR --shape reference`` use: training takes most of an hour
here, copying takes milliseconds. ``--train`` reruns the recipe (`training`) and writes
a folder of the same layout, plus the step log and the held-out figures, so the
committed weights can be checked and reproduced.

Either way the folder appears complete or not at all (written to a sibling, renamed).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
from mlx_lm.utils import save_config, save_model

from app.core.errors import KnownError
from app.core.files import paths, private_files
from app.core.modelkit.reference import chat_format, corpus, format_tasks, geometry
from app.core.modelkit.reference.recipes import (
    DEFAULT_FORMAT_RECIPE,
    DEFAULT_RECIPE,
    FormatRecipe,
    TrainingRecipe,
)
from app.core.modelkit.reference.training import (
    StepReport,
    TrainingLog,
    parameter_count,
    train,
    train_format,
    with_vocabulary,
)
from app.core.modelkit.tokenizer_training import ENDOFTEXT, IM_END, write_tokenizer

MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
TRAINING_LOG = "training_log.json"
EVALUATION = "evaluation.json"
LOSS_CURVE = "loss_curve.png"
# float16 keeps 11 bits of mantissa (bfloat16: 8); the copy circuit's sharp
# attention scores keep their margins, and the file is half the fp32 size.
SAVED_DTYPE = mx.float16


def committed_folder() -> Path:
    """The reference model shipped with Swapless."""
    return paths.resources_dir() / "quality" / "reference-model"


def _target_folder(folder: Path) -> None:
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f"{folder} already exists and is not an empty folder")


def _publish(staging: Path, folder: Path) -> Path:
    _target_folder(folder)
    if folder.exists():
        folder.rmdir()
    os.replace(staging, folder)
    return folder


def _staging(folder: Path) -> Path:
    private_files.make_private_dir(folder.parent)  # 0700 from the start
    return Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))


def install_reference_model(folder: str | Path) -> Path:
    """Copy the committed reference model into ``folder``.

    Raises:
        FileExistsError: ``folder`` exists and is not empty.
        KnownError: The committed model is missing from this installation.
    """
    folder = Path(folder)
    _target_folder(folder)
    source = committed_folder()
    missing = [name for name in MODEL_FILES if not (source / name).is_file()]
    if missing:
        raise KnownError(
            f"The reference model is missing from this installation ({source} lacks "
            f"{', '.join(missing)}); build it with `swapless make-model DIR --shape "
            "reference --train`."
        )
    staging = _staging(folder)
    try:
        for name in MODEL_FILES:
            shutil.copyfile(source / name, staging / name)
            # Private from the start: copies keep the umask's 0644 otherwise, and
            # the next start would have to tighten them (and say so).
            private_files.make_private(staging / name)
        return _publish(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def train_reference_model(
    folder: str | Path,
    recipe: TrainingRecipe = DEFAULT_RECIPE,
    on_step: Callable[[StepReport], None] = lambda _: None,
    on_checkpoint=None,
    format_recipe: FormatRecipe | None = DEFAULT_FORMAT_RECIPE,
) -> tuple[Path, TrainingLog]:
    """Train a reference model from scratch and write it to ``folder``.

    Args:
        folder: Where to write it; must not exist or be empty.
        recipe: The recall stages' recipe (default: the committed model's).
        format_recipe: The format stage after them (thinking, tool calls), or None
            for a recall-only model with the plain ChatML template.
        on_step: Progress after every optimizer step.
        on_checkpoint: ``(model, step)`` every 100 steps (see `training.train`).

    Returns:
        The folder and the training log (also saved as ``training_log.json``).
    """
    folder = Path(folder)
    _target_folder(folder)
    staging = _staging(folder)
    try:
        tokenizer = write_tokenizer(
            staging, geometry.VOCAB_SIZE, geometry.MAX_POSITION_EMBEDDINGS
        )
        model, log = train(
            tokenizer, recipe, on_step=on_step, on_checkpoint=on_checkpoint
        )
        if format_recipe is not None:
            model, format_log = _format_stage(
                model, tokenizer, staging, format_recipe, on_step, on_checkpoint
            )
            log = _joined(log, format_log)
        _save(staging, model, tokenizer, log, recipe, format_recipe)
        return _publish(staging, folder), log
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _joined(first: TrainingLog, second: TrainingLog) -> TrainingLog:
    """One log of two runs, the second's steps and times counted on from the first's."""
    steps = list(first.steps)
    last = first.steps[-1] if first.steps else None
    for report in second.steps:
        steps.append(
            StepReport(
                step=report.step + (last.step if last else 0),
                total_steps=len(first.steps) + report.total_steps,
                loss=report.loss,
                learning_rate=report.learning_rate,
                tokens=report.tokens + (last.tokens if last else 0),
                elapsed_s=report.elapsed_s + first.seconds,
            )
        )
    return TrainingLog(steps=steps, seconds=first.seconds + second.seconds)


def _format_stage(
    model, tokenizer, staging: Path, recipe: FormatRecipe, on_step, on_checkpoint
):
    """Grow the vocabulary and template, then train thinking and tool calls."""
    chat_format.extend_tokenizer(tokenizer)
    tokenizer.save(str(staging / "tokenizer.json"))
    config_path = staging / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text(encoding="utf-8"))
    tokenizer_config["chat_template"] = chat_format.CHAT_TEMPLATE
    config_path.write_text(json.dumps(tokenizer_config, indent=2), encoding="utf-8")
    docs = [d for d in corpus.documents() if not d.held_out]
    stream = corpus.TokenStream(tokenizer, docs)
    words = format_tasks.argument_words([d.text for d in docs])
    grown = with_vocabulary(model, tokenizer.get_vocab_size(), recipe.seed)
    return train_format(
        grown, stream, words, recipe, on_step=on_step, on_checkpoint=on_checkpoint
    )


def _save(
    staging: Path, model, tokenizer, log: TrainingLog, recipe, format_recipe
) -> None:
    config = geometry.reference_config()
    config["vocab_size"] = tokenizer.get_vocab_size()
    config["bos_token_id"] = tokenizer.token_to_id(ENDOFTEXT)
    config["eos_token_id"] = tokenizer.token_to_id(IM_END)
    recipe_dict = recipe.as_dict()
    if format_recipe is not None:
        recipe_dict["format_stage"] = format_recipe.as_dict()
    config["swapless_builder"] = {
        "shape": "reference",
        "random_weights": False,
        "parameters": parameter_count(model),
        "training_tokens": log.steps[-1].tokens if log.steps else 0,
        "training_seconds": round(log.seconds, 1),
        "recipe": recipe_dict,
    }
    _write_model(staging, model, config, log)


def _write_model(staging: Path, model, config: dict, log: TrainingLog) -> None:
    """Weights (float16), config and step log into ``staging``."""
    model.set_dtype(SAVED_DTYPE)
    mx.eval(model.parameters())
    save_model(staging, model)
    save_config(config, staging / "config.json")
    write_training_log(staging / TRAINING_LOG, log)


def train_format_from(
    base: str | Path,
    folder: str | Path,
    recipe: FormatRecipe = DEFAULT_FORMAT_RECIPE,
    on_step: Callable[[StepReport], None] = lambda _: None,
    on_checkpoint=None,
) -> tuple[Path, TrainingLog]:
    """Run only the format stage, on a recall-only reference folder's weights.

    ``base`` is a folder written by `train_reference_model` with ``format_recipe``
    None (plain ChatML, 2,048 tokens); the result is the same as the full run's when
    ``base`` holds the same recall stages' weights (the stage starts from float16).
    """
    from mlx_lm.utils import load_model
    from tokenizers import Tokenizer

    base, folder = Path(base), Path(folder)
    _target_folder(folder)
    staging = _staging(folder)
    try:
        shutil.copyfile(
            base / "tokenizer_config.json", staging / "tokenizer_config.json"
        )
        tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
        model, base_config = load_model(base)
        model.set_dtype(mx.float32)
        model, log = _format_stage(
            model, tokenizer, staging, recipe, on_step, on_checkpoint
        )
        base_recipe = TrainingRecipe(
            seed=base_config["swapless_builder"]["recipe"]["seed"]
        )
        _save(staging, model, tokenizer, log, base_recipe, recipe)
        return _publish(staging, folder), log
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def continue_format_from(
    base: str | Path,
    folder: str | Path,
    recipe: FormatRecipe,
    fresh_tool_heads: bool = True,
    on_step: Callable[[StepReport], None] = lambda _: None,
    on_checkpoint=None,
    checkpoint_every: int = 40,
) -> tuple[Path, TrainingLog]:
    """Train more on a reference folder already in the format (the tool stage).

    ``base`` keeps its tokenizer, template and config; only the weights change, and
    the config records ``recipe`` under ``tool_stage``. ``on_checkpoint(model, step)``
    sees the model every ``checkpoint_every`` steps (the committed weights are such a
    checkpoint: `recipes.TOOL_HEADS_RECIPE`).
    """
    from mlx_lm.utils import load_model
    from tokenizers import Tokenizer

    base, folder = Path(base), Path(folder)
    _target_folder(folder)
    staging = _staging(folder)
    try:
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(base / name, staging / name)
        tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
        model, config = load_model(base)
        model.set_dtype(mx.float32)
        docs = [d for d in corpus.documents() if not d.held_out]
        model, log = train_format(
            model,
            corpus.TokenStream(tokenizer, docs),
            format_tasks.argument_words([d.text for d in docs]),
            recipe,
            on_step=on_step,
            on_checkpoint=on_checkpoint,
            checkpoint_every=checkpoint_every,
            fresh_tool_heads=fresh_tool_heads,
        )
        builder = config["swapless_builder"]
        builder["recipe"].setdefault("tool_stage", []).append(recipe.as_dict())
        builder["training_tokens"] += log.steps[-1].tokens if log.steps else 0
        builder["training_seconds"] = round(
            builder["training_seconds"] + log.seconds, 1
        )
        _write_model(staging, model, config, log)
        return _publish(staging, folder), log
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_training_log(path: Path, log: TrainingLog) -> None:
    """Save the per-step losses (for the loss curve in docs/reference-model.md)."""
    data = {
        "seconds": log.seconds,
        "steps": [
            [s.step, round(s.loss, 5), s.learning_rate, s.tokens, round(s.elapsed_s, 2)]
            for s in log.steps
        ],
        "columns": ["step", "loss", "learning_rate", "tokens", "elapsed_s"],
    }
    path.write_text(json.dumps(data), encoding="utf-8")


def evaluate_folder(
    folder: str | Path,
    sizes=None,
    log: Callable[[str], None] = lambda _: None,
    format_probes: int = 20,
) -> dict:
    """Load a trained folder, measure it on held-out data, save the figures.

    Writes ``evaluation.json`` (and ``loss_curve.png`` when matplotlib is installed and
    the folder has its training log) next to the weights.

    Returns:
        The held-out figures (`evaluation.Evaluation.as_dict`).
    """
    from app.core.engine.loader import load_model_folder
    from app.core.modelkit.reference import evaluation
    from app.core.modelkit.reference.loss_curve import draw_loss_curve

    folder = Path(folder)
    loaded = load_model_folder(folder)
    figures = evaluation.evaluate(
        loaded, sizes or evaluation.EvaluationSizes(), log=log
    ).as_dict()
    if getattr(loaded.tokenizer, "has_thinking", False):
        from app.core.modelkit.reference.format_evaluation import evaluate_format

        figures["format"] = evaluate_format(loaded, format_probes, log=log).as_dict()
    (folder / EVALUATION).write_text(json.dumps(figures, indent=2), encoding="utf-8")
    if (folder / TRAINING_LOG).is_file():
        draw_loss_curve(folder / TRAINING_LOG, folder / LOSS_CURVE, figures)
    return figures
