"""`swapless bench`: measure Swapless side by side with plain mlx-lm, table and plots.

Prints the Markdown table on stdout (progress goes to stderr) and writes
``results.json``, ``results.md`` and PNG plots to ``--out``. The work is in `app.bench`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

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
    parser.add_argument(
        "--contexts",
        metavar="N,N",
        help="context lengths of the speed measurement (default: 1024,4096,8192; "
        "quick: 1024,2048)",
    )
    parser.add_argument(
        "--locomo",
        metavar="PATH",
        help="LoCoMo's data/locomo10.json (github.com/snap-research/locomo, CC BY-NC "
        "4.0, not shipped) for the recall_view part; default: $SWAPLESS_LOCOMO, "
        "else that part skips LoCoMo",
    )
    parser.add_argument(
        "--llama-bench",
        metavar="PATH",
        help="llama.cpp's llama-bench for the peers part (llama-quantize next to it); "
        "default: $SWAPLESS_LLAMA_BENCH, else the one `make peers` builds",
    )
    parser.set_defaults(run=run)


def _contexts(text: str | None) -> tuple[int, ...] | None:
    """Parse ``--contexts``; raises ValueError with the accepted form."""
    if text is None:
        return None
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        values = ()
    if not values or any(v < 2 for v in values):
        raise ValueError(
            f"--contexts takes comma-separated token counts of at least 2, got {text!r}"
        )
    return values


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
    if args.contexts:
        words += ["--contexts", args.contexts]
    if args.locomo:
        words += ["--locomo", args.locomo]
    if args.llama_bench:
        words += ["--llama-bench", args.llama_bench]
    return words


def run(args: argparse.Namespace) -> int:
    """Run the benchmark, print the table; exit code 1 when a measurement failed.

    The failed measurements are named in one line on stderr, after the table; the
    others' figures are in results.json and results.md all the same.
    """
    from app.bench.registry import select
    from app.bench.report.report import markdown
    from app.bench.runner import failure_message, run_bench
    from app.bench.settings import FULL, QUICK

    select(args.only)  # reject unknown names before any model is built or loaded
    contexts = _contexts(args.contexts)
    settings = QUICK if args.quick else FULL
    if contexts:
        settings = settings.with_changes(speed_contexts=contexts)
    if args.locomo:
        if not Path(args.locomo).expanduser().exists():
            print(f"swapless bench: no LoCoMo data at {args.locomo}", file=sys.stderr)
            return 2
        settings = settings.with_changes(locomo_path=args.locomo)
    if args.llama_bench:
        if not Path(args.llama_bench).expanduser().is_file():
            print(
                f"swapless bench: no llama-bench at {args.llama_bench}", file=sys.stderr
            )
            return 2
        settings = settings.with_changes(llama_bench=args.llama_bench)
    command = shlex.join(["swapless", *_command_args(args)])
    results = run_bench(
        args.out,
        args.model,
        quick=args.quick,
        only=args.only,
        settings=settings,
        command=command,
    )
    print(markdown(results), end="", flush=True)
    message = failure_message(results, args.out)
    if message is None:
        return 0
    print(message, file=sys.stderr, flush=True)
    return 1
