"""`swapless make-model`: build a model folder in real mlx-lm format.

Random-weight shapes (tiny, small, qwen05) are for tests, benchmarks and the demo; the
``reference`` shape is the trained reference model (docs/reference-model.md), copied
from the committed weights or, with ``--train``, trained anew on this machine.
"""

from __future__ import annotations

import argparse
import sys
import time

from app.cli import arg_types

# Plain data (no MLX import), so `swapless --help` stays fast.
from app.core.modelkit.arch_configs import ARCHES

SHAPES = ("tiny", "small", "qwen05", "reference")


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "make-model",
        help="build a local model (random weights for tests/demo, or the reference model)",
        description="Build a model folder in real mlx-lm format: a random-weight shape, "
        "or the trained reference model (--shape reference).",
    )
    parser.add_argument("folder", help="where to write the model")
    parser.add_argument("--shape", choices=SHAPES, default="tiny")
    parser.add_argument("--bits", type=int, choices=(4, 8, 16), default=16)
    parser.add_argument("--seed", type=arg_types.seed, default=0)
    parser.add_argument(
        "--arch",
        choices=ARCHES,
        default=None,
        help="architecture (default: the shape's); the hybrid and sliding-window "
        "families build through mlx-lm's own model classes",
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="with --shape reference: train it anew (the recall stages, then the reasoning "
        "and tool-call stage: over an hour on 2 CPU cores) "
        "instead of copying the committed weights",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the model and say where it is."""
    if args.shape == "reference":
        return _reference(args)
    if args.train:
        raise ValueError("--train applies to --shape reference only")
    from app.core.modelkit.model_builder import build_model

    started = time.perf_counter()
    folder = build_model(
        args.folder, shape=args.shape, bits=args.bits, seed=args.seed, arch=args.arch
    )
    print(
        f"Built {args.shape} model ({args.bits}-bit weights) in {folder} "
        f"in {time.perf_counter() - started:.1f} s.",
        file=sys.stderr,
    )
    return 0


def _reference(args: argparse.Namespace) -> int:
    if args.bits != 16 or args.arch not in (None, "llama"):
        raise ValueError("the reference model is a float16 llama: drop --bits/--arch")
    started = time.perf_counter()
    if not args.train:
        from app.core.modelkit.reference.install import install_reference_model

        folder = install_reference_model(args.folder)
        print(
            f"Copied the reference model to {folder} "
            f"in {time.perf_counter() - started:.1f} s.",
            file=sys.stderr,
        )
        return 0
    return _train_reference(args, started)


def _train_reference(args: argparse.Namespace, started: float) -> int:
    from dataclasses import replace

    from app.core.modelkit.reference import evaluation
    from app.core.modelkit.reference.geometry import VOCAB_SIZE
    from app.core.modelkit.reference.install import (
        evaluate_folder,
        train_reference_model,
    )
    from app.core.modelkit.reference.recipes import DEFAULT_RECIPE
    from app.core.modelkit.tokenizer_training import train_tokenizer

    recipe = replace(DEFAULT_RECIPE, seed=args.seed)
    tokenizer = train_tokenizer(VOCAB_SIZE)

    def on_step(report) -> None:
        if report.step % 10 == 0 or report.step == report.total_steps:
            rate = report.tokens / max(report.elapsed_s, 1e-9)
            print(
                f"step {report.step}/{report.total_steps}  loss {report.loss:.3f}  "
                f"{report.tokens:,} tokens  {rate:.0f} tok/s  "
                f"{report.elapsed_s / 60:.1f} min",
                file=sys.stderr,
                flush=True,
            )

    def on_checkpoint(model, step) -> None:
        recall = evaluation.training_recall(model, tokenizer)
        print(
            f"step {step}: pass-key recall at 512 tokens {recall:.0%}", file=sys.stderr
        )

    print(
        f"Training the reference model ({recipe.total_steps} steps, "
        f"{recipe.total_tokens:,} tokens, seed {recipe.seed}) …",
        file=sys.stderr,
    )
    folder, log = train_reference_model(args.folder, recipe, on_step, on_checkpoint)
    print(
        f"Trained the reference model into {folder} in {log.seconds / 60:.1f} min; "
        "measuring it on held-out data …",
        file=sys.stderr,
    )
    evaluate_folder(folder, log=lambda line: print(line, file=sys.stderr))
    print(
        f"Done in {(time.perf_counter() - started) / 60:.1f} min; figures in "
        f"{folder / 'evaluation.json'}.",
        file=sys.stderr,
    )
    return 0
