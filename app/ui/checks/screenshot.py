"""`make screenshot` and `make screenshots`: the real window after a short real conversation.

Runs under a real X server (``xvfb-run``) or offscreen, with a throw-away
``SWAPLESS_HOME``: it builds the demo model, chats a few turns with a small context
limit so a trim card and a filling context meter show up, lets the memory gauge collect
a few seconds of samples, then grabs the window after it has painted. The replies are
the demo model's noise, and the window says so.

* ``python -m app.ui.checks.screenshot [OUTPUT.png]``: the README picture (default
  ``resources/screenshot.png``).
* ``python -m app.ui.checks.screenshot --set DIR``: the pictures of the window's behaviour in
  ``DIR``: ``window-1280x800.png`` (after a reply), ``trim-card.png`` (a card opened on
  its summary), ``notice-under-pressure.png`` and ``dark-theme.png`` (switched live).
  The pressure picture is the one staged shot: this machine is not short of memory, so
  the gauge and the notice are fed one snapshot with 7 % of memory free (every other
  figure real), classified by the same code as a real one.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

DEFAULT_OUTPUT = Path(__file__).resolve().parents[3] / "resources" / "screenshot.png"
README_SIZE = (1360, 860)
LAPTOP_SIZE = (1280, 800)
STAGED_FREE_FRACTION = 0.07
TURNS = (
    "Hi! Can you summarise what a KV cache is, with a small Python example?",
    "How much memory does a 4-bit KV cache save compared with 16-bit?",
    "And what happens when the conversation grows past the context limit?",
    "Show me a table of the three presets you would use for long documents.",
    "Which preset keeps quotes exact, and why does it rebuild instead of splice?",
    "How does the memory gauge decide between normal, warning and critical?",
    "Thanks. One last question: can I keep chatting while memory runs low?",
)


class _Session:
    """The real window on a throw-away home, driven through its controllers."""

    def __init__(self, size: tuple[int, int]):
        from PySide6.QtWidgets import QApplication

        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QApplication.instance() or QApplication(["swapless"])
        assert isinstance(app, QApplication), "the window needs a QApplication"
        self.app = app
        self.app.setApplicationDisplayName("Swapless")
        from app.core.settings import AppSettings
        from app.core.store import Store
        from app.ui.common.garbage_collector import MainThreadGarbageCollector
        from app.ui.common.theme import apply_theme
        from app.ui.main_window import MainWindow

        self.collector = MainThreadGarbageCollector(self.app)
        apply_theme(self.app, "light")
        self.store = Store.open()
        self.window = MainWindow(
            self.store,
            AppSettings(theme="light"),
            restore_state=False,
            load_last_model=False,
        )
        self.window.resize(*size)
        self.window.show()

    def wait(self, signal, timeout_s: float, start=None) -> tuple:
        from app.ui.common.signal_wait import wait_for_signal

        return wait_for_signal(signal, timeout_s, start=start)

    def pause(self, ms: int) -> None:
        from PySide6.QtCore import QEventLoop, QTimer

        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def chat(self) -> None:
        """Load the demo and chat until a trim card shows (or the turns run out)."""
        from app.core.presets.presets import get_preset

        window = self.window
        self.wait(window.models.loaded, 300, window.models.load_demo)
        if window.models.info is None:
            raise RuntimeError("the demo model did not load")
        window.current.set_preset(
            get_preset("chat").with_changes(
                max_context=512,
                keep_ratio=0.5,
                max_tokens=40,
                temperature=0.8,
                summary_mode="extractive",
            )
        )
        for text in TURNS:
            self.wait(
                window.turns.reply_finished,
                120,
                lambda text=text: window.turns.send(text),
            )
        self.pause(4000)  # a few seconds of memory samples draw the sparkline

    def save(self, output: Path) -> Path:
        self.app.processEvents()
        self.window.repaint()
        self.app.processEvents()
        output.parent.mkdir(parents=True, exist_ok=True)
        if not self.window.grab().save(str(output), "PNG"):
            raise RuntimeError(f"could not write {output}")
        return output

    def show_trim_card(self) -> None:
        cards = self.window.chat_view.trim_cards()
        if cards:
            cards[0].expand_summary(True)
            self.app.processEvents()
            self.window.chat_view.scroll_area.ensureWidgetVisible(cards[0], 0, 0)
        self.app.processEvents()

    def stage_pressure(self) -> None:
        """Show one snapshot with little memory free (see the module docstring)."""
        from app.core.memory.pressure import pressure_signals, worst_level

        window = self.window
        window.sampler.blockSignals(True)  # real samples would clear the staged one
        self.pause(800)  # samples already on their way land first
        real = window.sampler.latest or window.memory_gauge.snapshot
        assert real is not None, "the window shows a snapshot from its first sample"
        available = int(real.total_bytes * STAGED_FREE_FRACTION)
        signals = pressure_signals(available_fraction=STAGED_FREE_FRACTION)
        staged = replace(
            real,
            available_bytes=available,
            pressure=worst_level(signals),
            pressure_source="staged for the screenshot",
            pressure_signals=tuple(signals),
        )
        window.memory_gauge.update_snapshot(staged)
        window.notices.show_pressure(staged)

    def switch_to_dark(self) -> None:
        controller = self.window.settings_controller
        controller.apply(controller.settings.with_changes(theme="dark"))
        self.pause(300)

    def close(self) -> None:
        from app.ui.window_threads import dispose_window

        self.window.sampler.blockSignals(False)
        dispose_window(self.window)
        self.collector.stop()


def take_screenshot(output: Path = DEFAULT_OUTPUT) -> Path:
    """Run the window through a short conversation and save the README picture."""
    with tempfile.TemporaryDirectory(prefix="swapless-screenshot-") as home:
        os.environ["SWAPLESS_HOME"] = home
        session = _Session(README_SIZE)
        try:
            session.chat()
            session.window.notices.dismiss("trim")
            session.window.chat_view.scroll_to_bottom()
            session.show_trim_card()
            return session.save(Path(output))
        finally:
            session.close()


def take_screenshot_set(folder: Path) -> list[Path]:
    """Save the four pictures of the window's behaviour in ``folder``."""
    with tempfile.TemporaryDirectory(prefix="swapless-screenshots-") as home:
        os.environ["SWAPLESS_HOME"] = home
        session = _Session(LAPTOP_SIZE)
        try:
            session.chat()
            session.window.chat_view.scroll_to_bottom()
            saved = [session.save(folder / "window-1280x800.png")]
            session.show_trim_card()
            saved.append(session.save(folder / "trim-card.png"))
            session.window.chat_view.scroll_to_bottom()
            session.stage_pressure()
            saved.append(session.save(folder / "notice-under-pressure.png"))
            session.window.sampler.blockSignals(False)
            session.pause(1200)  # real samples again: the staged notice goes away
            session.switch_to_dark()
            saved.append(session.save(folder / "dark-theme.png"))
            return saved
        finally:
            session.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m app.ui.checks.screenshot [OUTPUT.png] | --set DIR``."""
    parser = argparse.ArgumentParser(prog="python -m app.ui.checks.screenshot")
    parser.add_argument("output", nargs="?", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--set", type=Path, dest="folder", default=None)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.folder is not None:
        for path in take_screenshot_set(args.folder):
            print(f"screenshot saved to {path}")
    else:
        print(f"screenshot saved to {take_screenshot(args.output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
