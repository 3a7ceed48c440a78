"""`swapless make-model`: build a random-weight model folder in real mlx-lm format."""

from __future__ import annotations

import argparse
import sys
import time

from app.cli import arg_types

# Plain data (no MLX import), so `swapless --help` stays fast.
from app.core.engine.arch_configs import ARCHES


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "make-model",
        help="build a local random-weight model (tests, benchmarks, demo)",
        description="Build a model folder in real mlx-lm format with random weights.",
    )
    parser.add_argument("folder", help="where to write the model")
    parser.add_argument("--shape", choices=("tiny", "small", "qwen05"), default="tiny")
    parser.add_argument("--bits", type=int, choices=(4, 8, 16), default=16)
    parser.add_argument("--seed", type=arg_types.seed, default=0)
    parser.add_argument(
        "--arch",
        choices=ARCHES,
        default=None,
        help="architecture (default: the shape's); the hybrid and sliding-window "
        "families build through mlx-lm's own model classes",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Build the model and say where it is."""
    from app.core.engine.model_builder import build_model

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
