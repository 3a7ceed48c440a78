"""`swapless --smoke-test`: prove the packaged desktop app works end to end, headless.

`run_smoke_test` starts Qt offscreen with a throw-away ``SWAPLESS_HOME``, opens the real
main window, loads the demo model (copied from the user's home when it was built there
before, else built, then left there for the next run), sends one message, checks that the reply
streamed in on the generation thread (not the UI thread) and that the conversation is in
SQLite, then closes the window and checks that it shut down in time. It prints one line
per step and returns 0, or prints what failed and returns 1.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import traceback

EXIT_OK = 0
EXIT_FAILED = 1
LOAD_TIMEOUT_S = 180
REPLY_TIMEOUT_S = 120
SHUTDOWN_LIMIT_S = 2.0
SMOKE_MESSAGE = "Hello from the Swapless smoke test."


class SmokeTestFailure(Exception):
    """A check of the smoke test failed."""


def run_smoke_test() -> int:
    """Run the smoke test; return its exit code (0 = passed)."""
    from app.core.files import paths
    from app.core.modelkit.demo_model import copy_demo_model

    previous = {
        name: os.environ.get(name) for name in ("SWAPLESS_HOME", "QT_QPA_PLATFORM")
    }
    users_demo = paths.demo_model_dir()
    with tempfile.TemporaryDirectory(prefix="swapless-smoke-") as home:
        os.environ["SWAPLESS_HOME"] = home
        try:
            from PySide6.QtWidgets import QApplication

            if QApplication.instance() is None:
                os.environ["QT_QPA_PLATFORM"] = "offscreen"
            # Building the demo model takes seconds; the user's home keeps one copy.
            copy_demo_model(users_demo, paths.demo_model_dir())
            _run(home)
            copy_demo_model(paths.demo_model_dir(), users_demo)
        except SmokeTestFailure as exc:
            print(f"smoke test FAILED: {exc}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        except Exception:
            print("smoke test FAILED with an unexpected error:", file=sys.stderr)
            traceback.print_exc()
            return EXIT_FAILED
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
    print("smoke test passed", flush=True)
    return EXIT_OK


def _say(text: str) -> None:
    print(f"smoke test: {text}", flush=True)


def _wait(signal, timeout_s: float, failures=()) -> tuple:
    """Run the event loop until ``signal`` (its arguments) or a failure signal fires."""
    from app.ui.common.signal_wait import wait_for_signal

    return wait_for_signal(
        signal,
        timeout_s,
        failures=failures,
        error=SmokeTestFailure,
        timeout_message="nothing happened within {:.0f} s",
    )


def _run(home: str) -> None:
    from PySide6.QtWidgets import QApplication

    from app.ui.common.garbage_collector import MainThreadGarbageCollector

    app = QApplication.instance() or QApplication(["swapless-smoke-test"])
    collector = MainThreadGarbageCollector()
    try:
        _check_window(app, home)
    finally:
        collector.stop()


def _check_window(app, home: str) -> None:
    from PySide6.QtCore import Qt

    from app.core.presets.presets import get_preset
    from app.core.settings import AppSettings
    from app.core.store import Store
    from app.ui.main_window import MainWindow
    from app.ui.window_threads import dispose_window

    _say(f"Qt platform {app.platformName()}, home {home}")
    store = Store.open()
    window = MainWindow(
        store, AppSettings(), restore_state=False, load_last_model=False
    )
    window.show()
    app.processEvents()
    if not window.isVisible():
        raise SmokeTestFailure("the main window did not open")
    _say("main window open")

    window.models.load_demo()
    (info,) = _wait(window.models.loaded, LOAD_TIMEOUT_S, [window.models.load_failed])
    _say(f"demo model loaded ({info.model_type}, {info.num_layers} layers)")

    window.current.set_preset(
        get_preset("chat").with_changes(max_tokens=12, temperature=0.0)
    )
    threads: list[threading.Thread] = []
    chunks: list[str] = []

    def on_chunk(_cid: int, text: str) -> None:
        threads.append(threading.current_thread())
        chunks.append(text)

    # A direct connection runs in the emitting thread: it shows where tokens come from.
    window.worker.chunk_received.connect(on_chunk, Qt.ConnectionType.DirectConnection)
    window.turns.send(SMOKE_MESSAGE)
    conversation_id, report = _wait(
        window.turns.reply_finished, REPLY_TIMEOUT_S, [window.turns.reply_failed]
    )
    app.processEvents()
    if report.generated_tokens < 1 or not chunks:
        raise SmokeTestFailure("the reply had no tokens")
    if any(thread is threading.main_thread() for thread in threads):
        raise SmokeTestFailure("tokens were produced on the UI thread")
    _say(
        f"reply streamed in {len(chunks)} pieces, {report.generated_tokens} tokens at "
        f"{report.tokens_per_s:.0f} tok/s on thread {threads[0].name!r}"
    )

    messages = store.messages(conversation_id)
    roles = [(m.role, m.state) for m in messages]
    if roles != [("user", "complete"), ("assistant", "complete")]:
        raise SmokeTestFailure(f"the conversation in SQLite is {roles}")
    if messages[0].content != SMOKE_MESSAGE:
        raise SmokeTestFailure("the user message was not saved as sent")
    if window.chat_view.message_views()[-1].text != messages[1].content:
        raise SmokeTestFailure("the window does not show the saved reply")
    _say(f"conversation {conversation_id} saved in {store.path}")

    started = time.monotonic()
    window.close()
    elapsed = time.monotonic() - started
    if elapsed > SHUTDOWN_LIMIT_S:
        raise SmokeTestFailure(f"closing took {elapsed:.1f} s")
    _say(f"window closed in {elapsed * 1000:.0f} ms")
    dispose_window(window)
