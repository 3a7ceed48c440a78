"""The benchmark run every bench test module may share: all parts at `SMOKE` sizes.

One run on the tiny model (the engine loaded once, each part once) is what makes
running every part in `make test` affordable; tests that need other sizes run their
own part.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.bench.runner import run_bench
from app.bench.settings import SMOKE


@pytest.fixture(scope="session")
def smoke_run(tiny_model_dir, tmp_path_factory) -> tuple[Path, dict, list[str]]:
    """Every part at smoke sizes: (out folder, results, logged lines)."""
    out = tmp_path_factory.mktemp("bench-smoke")
    lines: list[str] = []
    results = run_bench(
        out,
        tiny_model_dir,
        settings=SMOKE,
        log=lines.append,
        command="pytest tests/bench",
    )
    return out, results, lines
