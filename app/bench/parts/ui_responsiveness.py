"""UI responsiveness: event-loop lateness while a reply streams, and cold start.

Calls `app.ui.checks.responsiveness` (written with the window code) in a subprocess with
``QT_QPA_PLATFORM=offscreen``, so Qt never loads into the benchmark process and the
engine there stays the only MLX user. The subprocess prints one marked JSON line.

Besides the model's own replies (short, on a small model), the chat view streams a
``ui_markdown_chars`` (200 KB in a full run) Markdown reply written by `long_markdown_reply`: what a long
answer with prose, lists, code and tables costs the UI thread to render as it grows.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.results import PartResult, Row

NAME = "ui"
TITLE = "UI: event-loop lateness while streaming, cold start to first paint"
MARKER = "@@swapless-bench-ui "
NEEDED = (
    "measure_streaming_lateness",
    "measure_markdown_streaming_lateness",
    "measure_cold_start",
)
TIMEOUT_S = 900
MARKDOWN_STREAM_FACTOR = 2
"""The Markdown reply streams over this many times the settings' ``ui_seconds``."""

_SCRIPT = """
import json, sys
from app.ui.checks.responsiveness import (
    measure_cold_start, measure_markdown_streaming_lateness, measure_streaming_lateness
)
lateness = measure_streaming_lateness(sys.argv[1], float(sys.argv[2]))
markdown = measure_markdown_streaming_lateness(int(sys.argv[4]), float(sys.argv[5]))
cold = measure_cold_start(runs=int(sys.argv[3]))
print({marker!r} + json.dumps(
    {{"lateness": lateness, "markdown_streaming": markdown, "cold_start_s": cold}}
), flush=True)
"""


def _functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def available(ctx: BenchContext) -> str | None:
    """Available once `app.ui.checks.responsiveness` has both measures (checked without Qt)."""
    if getattr(sys, "frozen", False):
        return "needs a source checkout: a frozen app cannot start Python workers"
    spec = importlib.util.find_spec("app.ui.checks.responsiveness")
    if spec is None or spec.origin is None:
        return "not available in this build: app/ui/checks/responsiveness.py is missing"
    missing = [n for n in NEEDED if n not in _functions(Path(spec.origin))]
    if missing:
        return f"not available in this build: app.ui.checks.responsiveness lacks {', '.join(missing)}"
    if importlib.util.find_spec("PySide6") is None:
        return "PySide6 is not installed"
    return None


def run(ctx: BenchContext) -> PartResult:
    """Run both UI measures in a subprocess and report them."""
    s = ctx.settings
    runs = s.ui_cold_start_runs
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    completed = subprocess.run(
        [
            sys.executable,
            "-c",
            _SCRIPT.format(marker=MARKER),
            str(ctx.model_dir),
            str(s.ui_seconds),
            str(runs),
            str(s.ui_markdown_chars),
            str(s.ui_seconds * MARKDOWN_STREAM_FACTOR),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    lines = [ln for ln in completed.stdout.splitlines() if ln.startswith(MARKER)]
    if not lines:
        raise RuntimeError(
            f"the UI measurement exited with code {completed.returncode}: "
            f"{completed.stderr.strip()[-800:]}"
        )
    data = json.loads(lines[-1][len(MARKER) :])
    lateness = data["lateness"]
    markdown = data["markdown_streaming"]
    result = PartResult()
    result.figures = {**data, "cold_start_runs": runs}
    result.rows = [
        Row(
            f"UI timer lateness while streaming, p50 / p99 ({lateness['samples']} ticks "
            f"of {lateness['interval_ms']} ms, {lateness['tokens_per_s']:.0f} tok/s)",
            f"{lateness['p50_ms']:.1f} ms / {lateness['p99_ms']:.1f} ms",
            f"max {lateness['max_ms']:.1f} ms",
        ),
        Row(
            f"UI timer lateness while a {markdown['reply_chars'] // 1000} KB Markdown "
            f"reply streams, p50 / p99 ({markdown['samples']} ticks in "
            f"{markdown['seconds']:.0f} s)",
            f"{markdown['p50_ms']:.1f} ms / {markdown['p99_ms']:.1f} ms",
            f"max {markdown['max_ms']:.1f} ms; last update shown "
            f"{markdown['final_render_ms']:.0f} ms after the last text",
        ),
        Row(
            f"Cold start to first paint (median of {runs})",
            f"{data['cold_start_s']:.2f} s",
        ),
    ]
    return result
