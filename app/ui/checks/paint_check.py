"""Catch the PySide6 build that drops a reference to ``None`` on every paint call.

PySide6 6.12.0 on Python 3.11 releases one reference to ``None`` it never took in
``QPainterPath.moveTo/lineTo/addRect`` and ``QPainter.setPen/drawPath/drawLine``. The
memory gauge paints a few hundred such calls per second, so ``None``'s count reaches
zero within two minutes and the interpreter aborts (``none_dealloc``). Python 3.12 made
``None`` immortal, so its count never moves there.

Two checks use this module:

* `painting_problem` runs at start-up: 512 path calls, well under a millisecond, and
  a sentence telling the user what to install when the count fell with them.
* ``python -m app.ui.checks.paint_check [ITERATIONS]`` paints the real memory gauge, context
  meter and a growing reply ``ITERATIONS`` times and prints the counts as JSON; the test
  runs it in a subprocess, so a leaking build fails the test instead of aborting it.
"""

from __future__ import annotations

import json
import os
import sys
import time

QUICK_CALLS = 256
# On a sound build the count moves by a few dozen at most, whatever the iterations.
QUICK_LEAK_THRESHOLD = QUICK_CALLS
DEFAULT_ITERATIONS = 2000
STREAM_EVERY = 10


def none_refcount() -> int:
    """The current reference count of ``None``."""
    return sys.getrefcount(None)


def painting_problem() -> str | None:
    """One sentence when this PySide6 drops references to None while painting, else None."""
    from PySide6 import __version__ as pyside_version
    from PySide6.QtGui import QPainterPath

    path = QPainterPath()
    before = none_refcount()
    for i in range(QUICK_CALLS):
        path.moveTo(float(i), 0.0)
        path.lineTo(float(i), 1.0)
    fallen = before - none_refcount()
    if fallen < QUICK_LEAK_THRESHOLD:
        return None
    python = ".".join(str(part) for part in sys.version_info[:3])
    return (
        f"PySide6 {pyside_version} on Python {python} drops a reference to None on "
        "every paint call, which crashes Swapless within minutes. Install an earlier "
        "PySide6 (pip install 'pyside6-essentials<6.12') or use Python 3.12 or newer."
    )


def paint_views(iterations: int = DEFAULT_ITERATIONS) -> dict:
    """Paint the gauge, the meter and a streamed reply ``iterations`` times.

    Returns:
        ``before`` / ``after`` / ``lowest`` reference counts of None, ``iterations``,
        ``seconds`` and the PySide6 and Python versions.
    """
    from PySide6 import __version__ as pyside_version
    from PySide6.QtWidgets import QApplication

    from app.ui.chat.message_view import MessageView
    from app.ui.status.context_meter_view import ContextMeterView
    from app.ui.status.memory_gauge_view import HISTORY_SAMPLES, MemoryGaugeView

    app = QApplication.instance() or QApplication(["swapless-paint-check"])
    gauge, meter = MemoryGaugeView(), ContextMeterView()
    reply = MessageView("assistant", "")
    for widget in (gauge, meter, reply):
        widget.resize(600, 80)
    snapshot = _snapshot()
    for _ in range(HISTORY_SAMPLES):  # a full sparkline: the most path calls per paint
        gauge.update_snapshot(snapshot)
    gauge.set_cap_fraction(0.75)
    state = _context_state()
    started = time.perf_counter()
    before = lowest = none_refcount()
    for i in range(iterations):
        gauge.update_snapshot(snapshot)
        gauge.grab()
        meter.set_state(state)
        meter.add_streamed_tokens(i)
        meter.grab()
        if i % STREAM_EVERY == 0:  # new text a few times a second, not on every paint
            reply.set_text(f"Reply at token {i}: **streamed** text with `code`. " * 4)
        reply.grab()
        lowest = min(lowest, none_refcount())
    after = none_refcount()
    seconds = time.perf_counter() - started
    for widget in (gauge, meter, reply):
        widget.deleteLater()
    app.processEvents()
    return {
        "before": before,
        "after": after,
        "lowest": min(lowest, after),
        "iterations": iterations,
        "seconds": round(seconds, 2),
        "pyside": pyside_version,
        "python": ".".join(str(part) for part in sys.version_info[:3]),
    }


def _snapshot():
    from app.core.memory.snapshot import MemorySnapshot, PressureLevel

    gib = 1024**3
    return MemorySnapshot(
        time=0.0,
        total_bytes=16 * gib,
        available_bytes=9 * gib,
        swap_total=0,
        swap_used=0,
        swap_in_rate=0.0,
        swap_out_rate=0.0,
        pressure=PressureLevel.NORMAL,
        pressure_source="paint check",
        kv_bytes=gib // 4,
    )


def _context_state():
    from app.core.budget.context_state import ContextState

    return ContextState(
        conversation_id=1,
        tokens=1500,
        effective_limit=4096,
        preset_limit=4096,
        kv_bytes=12 * 1024 * 1024,
        kv_bits=8,
        trims=1,
        next_trim_at=3584,
        exact=True,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m app.ui.checks.paint_check [ITERATIONS]``: print the counts as JSON."""
    argv = sys.argv[1:] if argv is None else argv
    iterations = int(argv[0]) if argv else DEFAULT_ITERATIONS
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    print(json.dumps(paint_views(iterations)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
