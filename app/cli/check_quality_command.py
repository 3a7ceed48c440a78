"""`swapless check-quality`: what each compression costs on *this* model, measured.

Compares 8- and 4-bit KV at groups 32/64/128 (and the presets' precisions) with full
precision, and splice / rebuild / no trim with an exact rebuild, on built-in probes;
prints a table (or ``--json``) and stores the results for the doctor and the app.
Ctrl-C stops it and keeps what was measured.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path

EXIT_INTERRUPTED = 130


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "check-quality",
        help="measure what 8/4-bit KV and trims cost in answers on a model",
        description="Compare each KV precision and trim method with full precision on "
        "built-in probes: top-1 agreement, mean KL, perplexity ratio, pass-key recall.",
    )
    parser.add_argument("--model", metavar="DIR", required=True, help="model folder")
    parser.add_argument(
        "--quick", action="store_true", help="fewer probes (about a minute on tiny)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--only",
        metavar="CELLS",
        help="comma-separated cells to measure, e.g. kv:4:64,trim:splice",
    )
    parser.add_argument("--no-trims", action="store_true", help="KV precisions only")
    parser.add_argument(
        "--no-store", action="store_true", help="do not save the results"
    )
    parser.set_defaults(run=run)


class _ProgressBar:
    """One self-rewriting line on a terminal; one line per finished cell otherwise."""

    WIDTH = 28

    def __init__(self, stream, enabled: bool):
        self.stream = stream
        self.enabled = enabled
        self.last = 0.0

    def update(self, event) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and event.done < event.total:
            return
        self.last = now
        filled = int(self.WIDTH * event.done / max(event.total, 1))
        bar = "#" * filled + "." * (self.WIDTH - filled)
        text = f"\r[{bar}] {event.done * 100 // max(event.total, 1):3d}%  "
        text += f"{event.label[:32]:32} {event.elapsed_s:5.0f} s"
        self.stream.write(text)
        self.stream.flush()

    def cell_done(self, line: str) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * (self.WIDTH + 50) + "\r")
        self.stream.write(line + "\n")
        self.stream.flush()


@contextlib.contextmanager
def _stop_on_interrupt(check):
    """Turn Ctrl-C into a stop of the check (which still reports what it measured).

    A signal handler rather than catching KeyboardInterrupt: the interrupt may land
    anywhere in the loop, and only the handler is sure not to lose an event.
    """
    stopped = threading.Event()

    def on_interrupt(signum, frame):
        if stopped.is_set():  # a second Ctrl-C: the user really wants out
            raise KeyboardInterrupt
        stopped.set()
        check.cancel()
        print("\nStopping after the current step …", file=sys.stderr, flush=True)

    if threading.current_thread() is not threading.main_thread():
        yield stopped
        return
    previous = signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, previous)


def run(args: argparse.Namespace) -> int:
    """Load the model, run the check, print and store the results."""
    from app.core.engine.engine import Engine
    from app.core.engine.quality.quality_run import start_quality_check
    from app.core.quality.events import CellMeasured, QualityProgress
    from app.core.quality.plan import plan_check
    from app.core.quality.report_text import one_line, table

    model_dir = Path(args.model).expanduser()
    only = (
        [key.strip() for key in args.only.split(",") if key.strip()]
        if args.only
        else None
    )
    plan = plan_check(model_dir, quick=args.quick, trims=not args.no_trims, only=only)
    engine = Engine.from_settings()
    bar = _ProgressBar(sys.stderr, sys.stderr.isatty())
    try:
        info = engine.load(model_dir)
        if info.random_weights:
            print(
                f"Note: {info.folder} has random weights; its numbers say nothing about "
                "answers (try `swapless make-model DIR --shape reference`).",
                file=sys.stderr,
            )
        check = start_quality_check(engine, plan)
        with _stop_on_interrupt(check) as stopped:
            while (event := check.next_event()) is not None:
                if isinstance(event, QualityProgress):
                    bar.update(event)
                elif isinstance(event, CellMeasured):
                    bar.cell_done(one_line(event.result))
        interrupted = stopped.is_set()
        report = check.report
    finally:
        engine.shutdown()
    if report is None:
        raise RuntimeError("the quality check ended without a report")
    stored = None
    if not args.no_store and report.results:
        stored = _store(report)
    if args.json:
        data = report.to_dict()
        data["stored"] = stored is not None
        print(json.dumps(data, indent=2))
    else:
        print(table(report))
        if stored is not None:
            print(f"\nSaved; `swapless doctor --model {model_dir}` shows it again.")
    return EXIT_INTERRUPTED if interrupted or report.cancelled else 0


def _store(report):
    """Save the report in the store; return its id (None when not stored)."""
    from app.cli.runtime import open_store

    store = open_store(lambda text: print(text, file=sys.stderr))
    try:
        return store.save_quality_report(report)
    finally:
        store.close()
