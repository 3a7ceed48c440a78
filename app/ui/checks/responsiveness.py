"""Measure how responsive the real window stays: while a reply streams, and at start.

Two numbers for the benchmark:

* `measure_streaming_lateness` runs the real main window on a model and, while replies
  stream, lets a 10 ms QTimer tick on the UI thread; how late each tick fires is how
  long the UI thread was busy (rendering Markdown, relayout, signal traffic). p50 and
  p99 of that lateness is what a user feels as lag.
* `measure_markdown_streaming_lateness` streams one long Markdown reply (200 KB in the
  benchmark) into the real chat view at a steady rate, with the same timer: the cost
  of rendering a reply that keeps growing, independent of how fast a model writes.
* `measure_cold_start` starts ``python -m app`` (the real entry point) in a subprocess
  with ``SWAPLESS_FIRST_PAINT_PROBE=1`` and returns the time from spawning it to the
  window's first paint event.

Both use a throw-away ``SWAPLESS_HOME``, so they never touch the user's conversations.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TIMER_INTERVAL_MS = 10
FEED_INTERVAL_MS = 5
SETTLE_TIMEOUT_S = 120
LOAD_TIMEOUT_S = 300
COLD_START_TIMEOUT_S = 60


def _percentile(values: list[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


def measure_streaming_lateness(
    model_dir: str | Path, seconds: float = 10.0, interval_ms: int = TIMER_INTERVAL_MS
) -> dict:
    """Stream replies in the real window for ``seconds`` and time a UI-thread timer.

    Args:
        model_dir: The model folder to load.
        seconds: How long to measure while replies stream (new replies are started
            until then).
        interval_ms: The timer's interval.

    Returns:
        ``p50_ms``, ``p99_ms``, ``max_ms`` (lateness of the timer while streaming),
        ``samples``, ``tokens`` and ``tokens_per_s`` (shown in the window),
        ``replies``, ``seconds`` and ``interval_ms``.

    Raises:
        RuntimeError: The model did not load or a reply failed.
    """
    from PySide6.QtCore import QElapsedTimer, QEventLoop, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    previous_home = os.environ.get("SWAPLESS_HOME")
    with tempfile.TemporaryDirectory(prefix="swapless-lateness-") as home:
        os.environ["SWAPLESS_HOME"] = home
        if QApplication.instance() is None and not _has_display():
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        # Kept referenced for the whole measurement: the application must outlive it.
        app = QApplication.instance() or QApplication(["swapless-lateness"])
        from app.core.presets.presets import get_preset
        from app.core.settings import AppSettings
        from app.core.store import Store
        from app.ui.common.garbage_collector import MainThreadGarbageCollector
        from app.ui.main_window import MainWindow
        from app.ui.window_threads import dispose_window

        collector = MainThreadGarbageCollector()

        store = Store.open(Path(home) / "lateness.db")
        window = MainWindow(
            store, AppSettings(), restore_state=False, load_last_model=False
        )
        try:
            window.resize(1200, 800)
            window.show()
            _wait_for(
                window.models.loaded,
                window.models.load_failed,
                LOAD_TIMEOUT_S,
                lambda: window.models.load(str(model_dir)),
            )
            window.current.set_preset(
                get_preset("chat").with_changes(
                    max_tokens=1024, max_context=16384, summary_mode="extractive"
                )
            )
            state: dict[str, Any] = {
                "streaming": False,
                "tokens": 0,
                "replies": 0,
                "failed": None,
            }
            lateness: list[float] = []
            clock = QElapsedTimer()
            clock.start()
            last_tick = [clock.nsecsElapsed()]

            def on_tick() -> None:
                now = clock.nsecsElapsed()
                if state["streaming"]:
                    lateness.append(max(0.0, (now - last_tick[0]) / 1e6 - interval_ms))
                last_tick[0] = now

            def on_chunk(_cid: int, _text: str) -> None:  # on the UI thread
                state["streaming"] = True
                state["tokens"] += 1

            def on_finished(_cid: int, _report) -> None:
                state["streaming"] = False
                state["replies"] += 1
                if time.monotonic() < deadline:
                    QTimer.singleShot(0, window, lambda: window.turns.send(prompt()))

            def on_failed(_cid: int, error) -> None:
                state["streaming"] = False
                state["failed"] = error.message

            def prompt() -> str:
                return f"Reply {state['replies'] + 1}: write a long answer with a list and code."

            window.turns.live_text_changed.connect(on_chunk)
            window.turns.reply_finished.connect(on_finished)
            window.turns.reply_failed.connect(on_failed)
            timer = QTimer()
            timer.setTimerType(Qt.TimerType.PreciseTimer)
            timer.setInterval(interval_ms)
            timer.timeout.connect(on_tick)
            timer.start()
            started = time.monotonic()
            deadline = started + seconds
            window.turns.send(prompt())
            loop = QEventLoop()
            QTimer.singleShot(int(seconds * 1000), loop.quit)
            loop.exec()
            timer.stop()
            elapsed = time.monotonic() - started
            if window.turns.busy:
                _wait_for(
                    window.turns.reply_finished,
                    window.turns.reply_failed,
                    30,
                    window.turns.stop,
                )
            if state["failed"]:
                raise RuntimeError(f"a reply failed: {state['failed']}")
            return {
                "p50_ms": round(statistics.median(lateness), 3) if lateness else 0.0,
                "p99_ms": round(_percentile(lateness, 0.99), 3),
                "max_ms": round(max(lateness), 3) if lateness else 0.0,
                "samples": len(lateness),
                "tokens": state["tokens"],
                "tokens_per_s": round(state["tokens"] / elapsed, 2) if elapsed else 0.0,
                "replies": state["replies"],
                "seconds": round(elapsed, 3),
                "interval_ms": interval_ms,
            }
        finally:
            dispose_window(window)
            app.processEvents()
            collector.stop()
            if previous_home is None:
                os.environ.pop("SWAPLESS_HOME", None)
            else:
                os.environ["SWAPLESS_HOME"] = previous_home


def measure_markdown_streaming_lateness(
    reply_chars: int = 200_000,
    seconds: float = 20.0,
    interval_ms: int = TIMER_INTERVAL_MS,
) -> dict:
    """Stream a long Markdown reply into the chat view and time a UI-thread timer.

    The reply (`app.core.text.synthetic_text.long_markdown_reply`) is appended in
    pieces every `FEED_INTERVAL_MS`, as fast as wall time says it should have arrived
    (so a busy UI thread receives bigger pieces, as it would from a model), through
    the calls the window makes for a streaming reply. Lateness is recorded from the
    first piece until the whole reply is on screen.

    Args:
        reply_chars: Length of the reply.
        seconds: How long the reply takes to arrive.
        interval_ms: The timer's interval.

    Returns:
        ``p50_ms``, ``p99_ms``, ``max_ms``, ``samples``, ``reply_chars``, ``seconds``
        (until the reply was on screen), ``final_render_ms`` (from the last piece to
        the reply on screen), ``pieces`` (documents the reply was laid out in) and
        ``interval_ms``.
    """
    from PySide6.QtCore import QElapsedTimer, QEventLoop, Qt, QTimer
    from PySide6.QtWidgets import QApplication

    from app.core.text.synthetic_text import long_markdown_reply

    if QApplication.instance() is None and not _has_display():
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    app = QApplication.instance() or QApplication(["swapless-markdown-lateness"])
    from app.ui.chat.chat_view import ChatView
    from app.ui.common.garbage_collector import MainThreadGarbageCollector

    collector = MainThreadGarbageCollector()
    reply = long_markdown_reply(reply_chars)
    view = ChatView()
    view.resize(1000, 800)
    view.show()
    app.processEvents()
    view.start_live_turn("Write a long answer with lists, code and tables.")
    clock = QElapsedTimer()
    clock.start()
    lateness: list[float] = []
    last_tick = [clock.nsecsElapsed()]
    state = {"fed": 0, "fed_at_ns": 0, "done_ns": 0}
    loop = QEventLoop()

    def on_tick() -> None:
        now = clock.nsecsElapsed()
        lateness.append(max(0.0, (now - last_tick[0]) / 1e6 - interval_ms))
        last_tick[0] = now
        live = view.live_reply
        if (
            state["fed"] >= len(reply)
            and live is not None
            and live.text == reply  # the throttle has passed the whole reply on
            and not _rendering(live.body)
        ):
            state["done_ns"] = now
            loop.quit()

    def on_feed() -> None:
        due = min(len(reply), int(len(reply) * clock.elapsed() / (seconds * 1000)) + 1)
        if due > state["fed"]:
            view.set_live_text(reply[:due])  # the reply so far, as the window shows it
            state["fed"] = due
            if due >= len(reply):
                state["fed_at_ns"] = clock.nsecsElapsed()
                feed.stop()

    ticker = QTimer()
    ticker.setTimerType(Qt.TimerType.PreciseTimer)
    ticker.setInterval(interval_ms)
    ticker.timeout.connect(on_tick)
    feed = QTimer()
    feed.setTimerType(Qt.TimerType.PreciseTimer)
    feed.setInterval(FEED_INTERVAL_MS)
    feed.timeout.connect(on_feed)
    try:
        ticker.start()
        feed.start()
        QTimer.singleShot(int((seconds + SETTLE_TIMEOUT_S) * 1000), loop.quit)
        loop.exec()
        ticker.stop()
        feed.stop()
        if not state["done_ns"]:
            raise RuntimeError(
                f"the reply was not on screen {SETTLE_TIMEOUT_S} s after it arrived"
            )
        live_reply = view.live_reply
        assert live_reply is not None, "done_ns is set only once the live reply shows"
        live = live_reply.body
        return {
            "p50_ms": round(statistics.median(lateness), 3) if lateness else 0.0,
            "p99_ms": round(_percentile(lateness, 0.99), 3),
            "max_ms": round(max(lateness), 3) if lateness else 0.0,
            "samples": len(lateness),
            "reply_chars": len(reply),
            "seconds": round(state["done_ns"] / 1e9, 3),
            "final_render_ms": round((state["done_ns"] - state["fed_at_ns"]) / 1e6, 1),
            "pieces": getattr(live, "pieces", 1),
            "interval_ms": interval_ms,
        }
    finally:
        view.end_live_turn()
        view.deleteLater()
        app.processEvents()
        collector.stop()


def _rendering(body) -> bool:
    """Whether the live reply still has text to put on screen (views that render
    synchronously have nothing pending)."""
    return bool(getattr(body, "busy", False))


def _wait_for(signal, failure, timeout_s: float, start) -> tuple:
    from app.ui.common.signal_wait import wait_for_signal

    return wait_for_signal(signal, timeout_s, failures=[failure], start=start)


def _has_display() -> bool:
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def measure_cold_start(runs: int = 1, command: list[str] | None = None) -> float:
    """Seconds from starting the app to its first paint (the median of ``runs``).

    Args:
        runs: How many starts to time.
        command: The command to start (default: ``python -m app``, the real entry).

    Raises:
        RuntimeError: The app did not report a first paint.
    """
    from app.ui.application import FIRST_PAINT_ENV, FIRST_PAINT_MARK

    command = command or [sys.executable, "-m", "app"]
    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="swapless-cold-start-") as home:
            env = dict(os.environ, SWAPLESS_HOME=home, **{FIRST_PAINT_ENV: "1"})
            if not _has_display():
                env.setdefault("QT_QPA_PLATFORM", "offscreen")
            started = time.time()
            result = subprocess.run(
                command,
                env=env,
                capture_output=True,
                text=True,
                timeout=COLD_START_TIMEOUT_S,
                check=False,
            )
            painted = [
                line.split()[1]
                for line in result.stdout.splitlines()
                if line.startswith(FIRST_PAINT_MARK)
            ]
            if not painted:
                raise RuntimeError(
                    f"the app did not report a first paint (exit {result.returncode}): "
                    f"{result.stderr.strip()[-500:]}"
                )
            times.append(float(painted[0]) - started)
    return statistics.median(times)
