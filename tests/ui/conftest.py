"""Fixtures of the window tests: a store, a real main window, the tiny model loaded.

The window is the product's own, with the real engine and worker threads; only the
model is the session's tiny random-weight one. Tests drive the window through its
controllers (``window.turns``, ``window.current``, ``window.models``…) and wait on their
signals, which fire on the UI thread once the window has shown the outcome. Qt's offscreen platform warns that it
cannot propagate size hints (or raise a window) whenever a top-level window is shown,
resized or raised; that message is platform noise, not a fault of the app, so it is
ignored here (every other Qt warning still fails a test).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QEvent

from app.core.presets.presets import Preset, get_preset
from app.core.settings import AppSettings
from app.core.store import Store
from app.ui.common.garbage_collector import MainThreadGarbageCollector

# The offscreen platform cannot resize, raise or move native windows and says so.
OFFSCREEN_NOISE = "This plugin does not support"
UI_TESTS = Path(__file__).resolve().parent
LOAD_TIMEOUT_MS = 30_000
TURN_TIMEOUT_MS = 30_000


def pytest_collection_modifyitems(items):
    for item in items:
        if UI_TESTS in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.qt_log_ignore(OFFSCREEN_NOISE))


@pytest.fixture(autouse=True)
def collect_garbage_on_the_ui_thread(qapp):
    """Keep Qt objects from being destroyed on the engine's thread, as the app does.

    pytest-qt closes widgets with ``deleteLater``, which does nothing without a running
    event loop; a window left for Python's garbage collector could then be destroyed
    on whichever thread collects (the engine's) and crash Qt. So, like `run_app`, the
    tests collect cycles on the UI thread only, and delete closed widgets at once.
    """
    collector = MainThreadGarbageCollector()
    yield
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    collector.collect_now()
    collector.stop()
    collector.deleteLater()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)


@pytest.fixture
def store(swapless_home):
    store = Store.open()
    yield store
    store.close()


@pytest.fixture
def make_window(qtbot, store):
    """Build main windows on the test's store; they are closed after the test."""
    from app.ui.main_window import MainWindow

    windows = []

    def make(settings: AppSettings | None = None, **kwargs):
        kwargs.setdefault("restore_state", False)
        kwargs.setdefault("load_last_model", False)
        window = MainWindow(store, settings or AppSettings(), **kwargs)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.close()


@pytest.fixture
def window(make_window, qtbot, tiny_model_dir):
    """A main window with the tiny model loaded and a quick, greedy preset."""
    window = make_window()
    with qtbot.waitSignal(window.models.loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.load(str(tiny_model_dir))
    window.current.set_preset(_quick_preset())
    return window


def _quick_preset(**changes) -> Preset:
    values = {
        "temperature": 0.0,
        "max_tokens": 16,
        "summary_mode": "extractive",
        **changes,
    }
    return get_preset("chat").with_changes(**values)


@pytest.fixture
def quick_preset():
    """Make the chat preset greedy, with short replies and extractive summaries."""
    return _quick_preset


@pytest.fixture
def send(qtbot):
    """Send a message in a window and wait for the reply; returns (id, report)."""

    def send(window, text: str, timeout: int = TURN_TIMEOUT_MS):
        with qtbot.waitSignal(window.turns.reply_finished, timeout=timeout) as blocker:
            assert window.turns.send(text)
        return blocker.args

    return send
