"""`make screenshot`: the real window, a short real conversation, saved as a PNG.

Runs under a real X server (``xvfb-run``) or offscreen, with a throw-away
``SWAPLESS_HOME``: it builds the demo model, chats a few turns with a small context
limit so a trim card and a filling context meter show up, lets the memory gauge collect
a few seconds of samples, then grabs the window after it has painted. The replies are
the demo model's noise, and the window says so: nothing in the picture is staged.

Usage: ``python -m app.ui.screenshot [OUTPUT.png]`` (default ``resources/screenshot.png``).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

DEFAULT_OUTPUT = Path(__file__).resolve().parents[2] / "resources" / "screenshot.png"
WINDOW_SIZE = (1360, 860)
TURNS = (
    "Hi! Can you summarise what a KV cache is, with a small Python example?",
    "How much memory does a 4-bit KV cache save compared with 16-bit?",
    "And what happens when the conversation grows past the context limit?",
    "Show me a table of the three presets you would use for long documents.",
    "Which preset keeps quotes exact, and why does it rebuild instead of splice?",
    "How does the memory gauge decide between normal, warning and critical?",
    "Thanks. One last question: can I keep chatting while memory is tight?",
)


def take_screenshot(output: Path = DEFAULT_OUTPUT) -> Path:
    """Run the window through a short conversation and save a PNG of it."""
    from PySide6.QtCore import QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    with tempfile.TemporaryDirectory(prefix="swapless-screenshot-") as home:
        os.environ["SWAPLESS_HOME"] = home
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QApplication.instance() or QApplication(["swapless"])
        app.setApplicationDisplayName("Swapless")
        from app.core.presets import get_preset
        from app.core.settings import AppSettings
        from app.core.store import Store
        from app.ui.garbage_collector import MainThreadGarbageCollector
        from app.ui.main_window import MainWindow, dispose_window
        from app.ui.theme import apply_theme

        collector = MainThreadGarbageCollector(app)
        apply_theme(app, "light")
        store = Store.open()
        window = MainWindow(
            store,
            AppSettings(theme="light"),
            restore_state=False,
            load_last_model=False,
        )
        window.resize(*WINDOW_SIZE)
        window.show()

        def wait(signal, timeout_s: float, start=None) -> None:
            loop = QEventLoop()
            signal.connect(loop.quit)
            QTimer.singleShot(int(timeout_s * 1000), loop.quit)
            if start is not None:
                start()
            loop.exec()
            signal.disconnect(loop.quit)

        wait(window.model_loaded, 300, window.load_demo_model)
        if window.model_info is None:
            raise RuntimeError("the demo model did not load")
        window.set_preset(
            get_preset("chat").with_changes(
                max_context=512,
                keep_ratio=0.5,
                max_tokens=40,
                temperature=0.8,
                summary_mode="extractive",
            )
        )
        for text in TURNS:
            wait(
                window.reply_finished, 120, lambda text=text: window.send_message(text)
            )
        window.banners.hide_banner("trim")
        cards = window.chat_view.trim_cards()
        if cards:
            cards[0].expand_summary(True)
        # A few seconds of memory samples draw the sparkline.
        loop = QEventLoop()
        QTimer.singleShot(4000, loop.quit)
        loop.exec()
        app.processEvents()
        window.chat_view.scroll_to_bottom()
        app.processEvents()
        if cards:
            window.chat_view.scroll_area.ensureWidgetVisible(cards[0], 0, 0)
            app.processEvents()
        window.repaint()
        app.processEvents()
        output = Path(output)
        output.parent.mkdir(parents=True, exist_ok=True)
        if not window.grab().save(str(output), "PNG"):
            raise RuntimeError(f"could not write {output}")
        dispose_window(window)
        collector.stop()
    return output


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``python -m app.ui.screenshot [OUTPUT.png]``."""
    argv = sys.argv[1:] if argv is None else argv
    output = Path(argv[0]) if argv else DEFAULT_OUTPUT
    print(f"screenshot saved to {take_screenshot(output)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
