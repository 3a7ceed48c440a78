"""Painting must not drop references to None (PySide6 6.12.0 on Python 3.11 does).

The window's gauge, meter and a streamed reply are painted hundreds of times in a
subprocess: a leaking build aborts there (``none_dealloc``) or shows the count falling,
and either fails this test without taking pytest down. On a sound build the count moves
by a small constant whatever the number of paints; on Python 3.12+ None is immortal and
its count does not move at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from PySide6.QtWidgets import QApplication

from app.ui.checks.paint_check import painting_problem

# None's count is ~17,000 at the start here, so a leaking build (~360 a paint) reaches
# zero and aborts within ~50 paints: 300 is six times that (2,000 took ~10 CPU-s more).
ITERATIONS = 300
# A sound build moves by a few dozen either way; a leaking one loses ~360 per paint.
NOISE = 100


def test_painting_the_views_hundreds_of_times_keeps_none_alive():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    result = subprocess.run(
        [sys.executable, "-m", "app.ui.checks.paint_check", str(ITERATIONS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (
        f"painting crashed the process (exit {result.returncode}): "
        f"{result.stderr.strip()[-400:]}"
    )
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    assert counts["iterations"] == ITERATIONS
    assert counts["lowest"] >= counts["before"] - NOISE, counts
    assert counts["after"] >= counts["before"] - NOISE, counts


def test_the_start_up_check_passes_on_this_build(qapp):
    assert isinstance(QApplication.instance(), QApplication)
    assert painting_problem() is None
