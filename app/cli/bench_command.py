"""`swapless bench`: measure Swapless side by side with plain mlx-lm, table and plots.

Prints the Markdown table on stdout (progress goes to stderr) and writes
``results.json``, ``results.md`` and PNG plots to ``--out``. The work is in `app.bench`.
"""

from __future__ import annotations

import argparse
import shlex

DEFAULT_OUT = "bench-results"


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    from app.bench.registry import MEASUREMENTS

    parser = subcommands.add_parser(
        "bench",
        help="benchmark Swapless against plain mlx-lm (table, results.json, plots)",
        description="Measure what Swapless promises side by side with plain mlx-lm: "
        "engine overhead, KV bytes, turn reuse, trims, long conversations, long "
        "documents, prefix cache, decode speed vs context and UI responsiveness. "
        "Comparisons are interleaved and reported as ratios with their spread. "
        f"Measurements: {', '.join(MEASUREMENTS)}.",
    )
    parser.add_argument(
        "--model",
        metavar="DIR",
        help="mlx-lm model folder (default: a 'small' random-weight model built once "
        "under SWAPLESS_HOME/models/bench-small)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes (about 3 minutes)"
    )
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"folder for results.json, results.md and the plots ({DEFAULT_OUT})",
    )
    parser.add_argument(
        "--only",
        metavar="NAMES",
        help="comma-separated measurements to run (default: all)",
    )
    parser.set_defaults(run=run)


def _command_args(args: argparse.Namespace) -> list[str]:
    """The arguments that reproduce this run, for results.json."""
    words = ["bench"]
    if args.model:
        words += ["--model", args.model]
    if args.quick:
        words.append("--quick")
    words += ["--out", args.out]
    if args.only:
        words += ["--only", args.only]
    return words


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table; exit code 1 when a measurement failed."""
    from app.bench.registry import select
    from app.bench.report import markdown
    from app.bench.runner import run_bench

    select(args.only)  # reject unknown names before any model is built or loaded
    command = shlex.join(["swapless", *_command_args(args)])
    results = run_bench(
        args.out,
        args.model,
        quick=args.quick,
        only=args.only,
        command=command,
    )
    print(markdown(results), end="", flush=True)
    failed = [n for n, p in results["parts"].items() if p["status"] == "failed"]
    return 1 if failed else 0
