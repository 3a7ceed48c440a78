"""Start the desktop app: `run_app(argv)` is what ``swapless`` (no subcommand) calls.

Importing this module is cheap on purpose (standard library only): Qt, the store and the
window are imported inside `run_app`, and MLX is imported later still, on the engine's
thread, when a model loads, so the window paints well before any of that.

Start order: QApplication, a check that this PySide6 does not drop references to None
while painting (`paint_check`; one line and exit code 2 if it does), the error reporter
(uncaught errors go to the log and a dialog), settings (a broken settings file is
reported in the window and the defaults are used), theme, the store (it recovers from
crashes before anything reads it; a store that cannot open is a dialog and exit code 2),
the window, the event loop.

``SWAPLESS_FIRST_PAINT_PROBE=1`` makes the app print ``SWAPLESS_FIRST_PAINT <unix time>``
when the window first paints, then quit: `responsiveness.measure_cold_start` uses it.
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
import time
from pathlib import Path

FIRST_PAINT_ENV = "SWAPLESS_FIRST_PAINT_PROBE"
FIRST_PAINT_MARK = "SWAPLESS_FIRST_PAINT"
EXIT_OK = 0
EXIT_CANNOT_START = 2

log = logging.getLogger(__name__)


def setup_logging() -> None:
    """Log warnings and bugs (with tracebacks) to ``SWAPLESS_HOME/logs/swapless.log``."""
    from app.core.files import paths, private_files

    root = logging.getLogger()
    if any(getattr(h, "_swapless", False) for h in root.handlers):
        return
    handler: logging.Handler
    try:
        handler = logging.handlers.RotatingFileHandler(
            paths.logs_dir() / "swapless.log",
            maxBytes=2_000_000,
            backupCount=3,
            encoding="utf-8",
        )
        private_files.make_private(Path(handler.baseFilename))
    except OSError:
        handler = logging.StreamHandler(sys.stderr)
    vars(handler)["_swapless"] = True  # marks ours: a second call adds no other
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.INFO:
        root.setLevel(logging.INFO)


def load_settings_or_defaults():
    """Return (settings, problem): the saved settings, or the defaults and why."""
    from app.core.errors import SettingsError
    from app.core.settings import AppSettings, load_settings

    try:
        return load_settings(), None
    except SettingsError as exc:
        return AppSettings(), str(exc)


def run_app(argv: list[str] | None = None, model: Path | None = None) -> int:
    """Run the desktop app until its window closes.

    Args:
        argv: Extra command-line arguments (passed to Qt, e.g. ``-platform``).
        model: A model folder to load at start instead of the last one (``--model``).

    Returns:
        The exit code: 0, or 2 when the conversation store cannot be opened or this
        PySide6 cannot paint safely.
    """
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.core.errors import KnownError

    setup_logging()
    app = QApplication.instance() or QApplication(["swapless", *(argv or [])])
    assert isinstance(app, QApplication), "the window needs a QApplication"
    from app.ui.checks.paint_check import painting_problem

    problem = painting_problem()
    if problem:
        print(f"swapless: error: {problem}", file=sys.stderr)
        log.error("not starting: %s", problem)
        return EXIT_CANNOT_START
    from app.ui.common.error_reporting import ErrorReporter
    from app.ui.common.garbage_collector import MainThreadGarbageCollector

    window = None
    reporter = ErrorReporter(lambda: window)
    reporter.install()
    collector = MainThreadGarbageCollector(app)
    app.setApplicationName("Swapless")
    app.setApplicationDisplayName("Swapless")
    app.setDesktopFileName("swapless")
    settings, settings_problem = load_settings_or_defaults()
    if model is not None:
        settings = settings.with_changes(last_model=str(model))

    from app.ui.common.theme import apply_theme

    apply_theme(app, settings.theme)
    from app.core.store import Store

    try:
        store = Store.open()
    except KnownError as exc:
        QMessageBox.critical(None, "Swapless cannot start", str(exc))
        collector.stop()
        reporter.uninstall()
        return EXIT_CANNOT_START

    from app.ui.main_window import MainWindow
    from app.ui.window_threads import STUCK_THREADS, dispose_window

    window = MainWindow(store, settings)
    if settings_problem:
        window.notices.show_settings_problem(settings_problem)
    from app.core.presets.presets import skipped_user_presets

    # A broken user preset, or one named like a built-in, is said, never silent.
    window.notices.show_preset_problems(skipped_user_presets())
    if os.environ.get(FIRST_PAINT_ENV):
        _install_first_paint_probe(app, window)
    window.show()
    code = app.exec()
    window.shutdown()
    if STUCK_THREADS:
        # A model was still loading: its thread cannot be stopped, so do not wait for it.
        logging.shutdown()
        os._exit(code)
    dispose_window(window)
    window = None
    collector.stop()
    reporter.uninstall()
    return code


def _install_first_paint_probe(app, window) -> None:
    from PySide6.QtCore import QEvent, QObject, QTimer

    class FirstPaintProbe(QObject):
        def __init__(self):
            super().__init__(window)
            self.seen = False

        def eventFilter(self, watched, event) -> bool:
            if (
                not self.seen
                and event.type() == QEvent.Type.Paint
                and hasattr(watched, "window")
                and watched.window() is window
            ):
                self.seen = True
                print(f"{FIRST_PAINT_MARK} {time.time():.6f}", flush=True)
                QTimer.singleShot(0, window.close)
            return False

    probe = FirstPaintProbe()
    app.installEventFilter(probe)


if __name__ == "__main__":
    raise SystemExit(run_app(sys.argv[1:]))
