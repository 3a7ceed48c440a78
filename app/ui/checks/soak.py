"""`make soak` / `swapless --soak SECONDS`: the real window for minutes, checked as it runs.

A smoke test proves the app starts; a desktop app must also last. This runs the real
main window (offscreen, or on a display such as Xvfb) with the real engine and the demo
model (or ``--model DIR``) for ``SECONDS``: the memory gauge samples and paints twice a
second the whole time, one conversation is chatted until it is trimmed, and a short
reply streams every `REPLY_EVERY_S` after that. It fails, printing why, on:

* a Qt warning (Qt's own message handler; the offscreen platform's "does not support"
  notices excepted) or an uncaught Python exception;
* a reply that does not finish within `REPLY_TIMEOUT_S` (stuck), or fails;
* no trim within `MAX_TURNS` turns, or the gauge not painting;
* ``None``'s reference count falling (PySide6 6.12.0 on Python 3.11 drops one per paint
  call and aborts the process within two minutes; a crash fails the run too);
* the window growing wider than it was set (status text must elide, not widen).

It prints one line per phase and a summary, and returns 0 when everything held.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import traceback
from typing import NoReturn

DEFAULT_SECONDS = 180
WINDOW_SIZE = (1280, 800)
LOAD_TIMEOUT_S = 300
REPLY_TIMEOUT_S = 120
REPLY_EVERY_S = 30
MAX_TURNS = 30
CHECK_EVERY_MS = 2000
# The count moves by a few dozen to a few hundred while threads run; a leaking build
# loses about 700 a second (two sparkline paints of 360 path calls).
REFCOUNT_FALL_LIMIT = 2000
OFFSCREEN_NOISE = "This plugin does not support"
TURN = (
    "Turn {n}: please remember that shelf {n} holds {n} blue boxes, {n} red pens and a "
    "note from the archive; then tell me something about it."
)


class SoakFailure(Exception):
    """A check of the soak run failed."""


def _say(text: str) -> None:
    print(f"soak: {text}", flush=True)


def run_soak(seconds: float = DEFAULT_SECONDS, model_dir: str | None = None) -> int:
    """Run the soak; return 0 when it held, 1 when a check failed."""
    with tempfile.TemporaryDirectory(prefix="swapless-soak-") as home:
        os.environ["SWAPLESS_HOME"] = home
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        try:
            summary = _Soak(seconds, model_dir).run()
        except SoakFailure as exc:
            print(f"soak FAILED: {exc}", file=sys.stderr, flush=True)
            return 1
        except Exception:
            print("soak FAILED with an unexpected error:", file=sys.stderr)
            traceback.print_exc()
            return 1
    _say(f"passed: {summary}")
    return 0


class _Soak:
    def __init__(self, seconds: float, model_dir: str | None):
        self.seconds = seconds
        self.model_dir = model_dir
        self.warnings: list[str] = []
        self.exceptions: list[str] = []
        self.paints = 0
        self.replies = 0
        self.trims = 0
        self.refcounts: list[int] = []

    def run(self) -> str:
        from PySide6.QtCore import QtMsgType, qInstallMessageHandler
        from PySide6.QtWidgets import QApplication

        from app.ui.common.garbage_collector import MainThreadGarbageCollector

        def on_qt_message(kind, _context, message) -> None:
            quiet = kind in (QtMsgType.QtDebugMsg, QtMsgType.QtInfoMsg)
            if not quiet and OFFSCREEN_NOISE not in message:
                self.warnings.append(message)

        previous_handler = qInstallMessageHandler(on_qt_message)
        previous_hooks = (sys.excepthook, threading.excepthook)
        sys.excepthook = self._on_exception
        threading.excepthook = self._on_thread_exception
        app = QApplication.instance() or QApplication(["swapless-soak"])
        collector = MainThreadGarbageCollector()
        try:
            return self._run_window(app)
        finally:
            collector.stop()
            sys.excepthook, threading.excepthook = previous_hooks
            qInstallMessageHandler(previous_handler)

    def _on_exception(self, kind, value, tb) -> None:
        self.exceptions.append("".join(traceback.format_exception(kind, value, tb)))

    def _on_thread_exception(self, args) -> None:
        self._on_exception(args.exc_type, args.exc_value, args.exc_traceback)

    def _run_window(self, app) -> str:
        from app.core.settings import AppSettings
        from app.core.store import Store
        from app.ui.checks.paint_check import none_refcount
        from app.ui.main_window import MainWindow
        from app.ui.window_threads import dispose_window

        _say(f"Qt platform {app.platformName()}, {self.seconds:.0f} s")
        started = time.monotonic()
        store = Store.open()
        window = MainWindow(
            store, AppSettings(), restore_state=False, load_last_model=False
        )
        try:
            window.resize(*WINDOW_SIZE)
            window.show()
            self._count_paints(window.memory_gauge.sparkline)
            window.turns.trimmed.connect(self._on_trimmed)
            self._load(window)
            self.refcounts.append(none_refcount())
            self._chat_until_trimmed(window)
            self._keep_running(window, started)
            self._check(window)
            width, samples = window.width(), window.memory_gauge.samples
        finally:
            dispose_window(window)
        low = min(self.refcounts)
        return (
            f"{time.monotonic() - started:.0f} s, {self.replies} replies, "
            f"{self.trims} trim(s), {self.paints} sparkline paints, "
            f"{samples} memory samples, None refcount "
            f"{self.refcounts[0]} → {self.refcounts[-1]} (lowest {low}), "
            f"window width {width} px, 0 Qt warnings"
        )

    def _count_paints(self, widget) -> None:
        from PySide6.QtCore import QEvent, QObject

        soak = self

        class PaintCounter(QObject):
            def eventFilter(self, _watched, event) -> bool:
                if event.type() == QEvent.Type.Paint:
                    soak.paints += 1
                return False

        self._paint_counter = PaintCounter(widget)
        widget.installEventFilter(self._paint_counter)

    def _on_trimmed(self, _conversation_id: int, _outcome) -> None:
        self.trims += 1

    def _wait(self, signal, timeout_s: float, failures=(), start=None) -> tuple:
        from app.ui.common.signal_wait import wait_for_signal

        return wait_for_signal(
            signal,
            timeout_s,
            failures=failures,
            start=start,
            error=SoakFailure,
            timeout_message="stuck: nothing happened within {:.0f} s",
        )

    def _load(self, window) -> None:
        models = window.models
        start = (
            (lambda: models.load(self.model_dir))
            if self.model_dir
            else models.load_demo
        )
        (info,) = self._wait(models.loaded, LOAD_TIMEOUT_S, [models.load_failed], start)
        _say(f"model loaded: {info.model_type}, {info.num_layers} layers")
        from app.core.presets.presets import get_preset

        window.current.set_preset(
            get_preset("chat").with_changes(
                max_context=512, keep_ratio=0.5, max_tokens=40, temperature=0.8
            )
        )

    def _reply(self, window, text: str) -> None:
        turns = window.turns
        self._wait(
            turns.reply_finished,
            REPLY_TIMEOUT_S,
            [turns.reply_failed],
            lambda: turns.send(text) or _refused(),
        )
        self.replies += 1

    def _chat_until_trimmed(self, window) -> None:
        for n in range(1, MAX_TURNS + 1):
            self._reply(window, TURN.format(n=n))
            if self.trims:
                _say(f"trimmed after {n} turns")
                return
        raise SoakFailure(f"no trim within {MAX_TURNS} turns at a 512-token limit")

    def _keep_running(self, window, started: float) -> None:
        from PySide6.QtCore import QEventLoop, QTimer

        from app.ui.checks.paint_check import none_refcount

        next_reply = time.monotonic() + REPLY_EVERY_S
        while True:
            left = self.seconds - (time.monotonic() - started)
            if left <= 0:
                break
            loop = QEventLoop()
            QTimer.singleShot(int(min(left, CHECK_EVERY_MS / 1000) * 1000), loop.quit)
            loop.exec()
            self.refcounts.append(none_refcount())
            self._check(window)
            if time.monotonic() >= next_reply and left > REPLY_TIMEOUT_S / 4:
                self._reply(window, TURN.format(n=self.replies + 1))
                next_reply = time.monotonic() + REPLY_EVERY_S

    def _check(self, window) -> None:
        if self.warnings:
            raise SoakFailure(f"Qt warning: {self.warnings[0]}")
        if self.exceptions:
            raise SoakFailure(f"uncaught exception:\n{self.exceptions[0]}")
        fallen = self.refcounts[0] - self.refcounts[-1]
        if fallen > REFCOUNT_FALL_LIMIT:
            raise SoakFailure(
                f"None's reference count fell by {fallen} "
                f"({self.refcounts[0]} → {self.refcounts[-1]}): this PySide6 drops "
                "references while painting and will crash"
            )
        if window.width() > WINDOW_SIZE[0]:
            raise SoakFailure(f"the window widened itself to {window.width()} px")
        if len(self.refcounts) > 3 and self.paints == 0:
            raise SoakFailure("the memory gauge never painted")


def _refused() -> NoReturn:
    raise SoakFailure("the window refused to send a message")


def main(argv: list[str] | None = None) -> int:
    """``python -m app.ui.checks.soak [--seconds N] [--model DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m app.ui.checks.soak")
    parser.add_argument("--seconds", type=float, default=DEFAULT_SECONDS)
    parser.add_argument("--model", default=None, help="a model folder (default: demo)")
    args = parser.parse_args(argv)
    return run_soak(args.seconds, args.model)


if __name__ == "__main__":
    raise SystemExit(main())
