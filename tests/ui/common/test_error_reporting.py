"""Uncaught errors reach the log with their traceback, and the user in a dialog."""

from __future__ import annotations

import logging
import sys
import threading

import pytest
from PySide6.QtWidgets import QMessageBox

from app.ui.common.error_reporting import ErrorReporter


@pytest.fixture
def reporter(qtbot):
    reporter = ErrorReporter()
    reporter.install()
    yield reporter
    reporter.uninstall()
    for box in reporter.dialogs:
        box.close()


def _fail_here():
    raise ValueError("the bad value")


def test_an_error_in_a_thread_is_logged_and_shown_on_the_ui_thread(
    qtbot, reporter, caplog
):
    caplog.set_level(logging.ERROR, logger="app.ui.common.error_reporting")
    with qtbot.waitSignal(reporter.bug_reported, timeout=5000):
        thread = threading.Thread(target=_fail_here, name="worker-x")
        thread.start()
        thread.join()
    qtbot.waitUntil(lambda: bool(reporter.dialogs), timeout=2000)
    record = next(r for r in caplog.records if "uncaught exception" in r.getMessage())
    assert "thread 'worker-x'" in record.getMessage()
    assert "Traceback" in record.getMessage() and "_fail_here" in record.getMessage()
    box: QMessageBox = reporter.dialogs[-1]
    assert box.isVisible()
    assert "ValueError: the bad value" in box.text()
    assert "test_error_reporting.py:" in box.text() and "in _fail_here" in box.text()
    assert "swapless.log" in box.text()
    assert "_fail_here" in box.detailedText()


@pytest.mark.qt_no_exception_capture
def test_an_error_in_a_slot_goes_through_sys_excepthook(qtbot, reporter, caplog):
    caplog.set_level(logging.ERROR, logger="app.ui.common.error_reporting")
    assert sys.excepthook == reporter._on_exception
    try:
        _fail_here()
    except ValueError:
        sys.excepthook(*sys.exc_info())
    assert reporter.reports == 1 and reporter.dialogs
    assert any("the bad value" in r.getMessage() for r in caplog.records)


def test_uninstall_gives_the_hooks_back(qtbot):
    before = (sys.excepthook, threading.excepthook)
    reporter = ErrorReporter()
    reporter.install()
    assert sys.excepthook is not before[0]
    reporter.uninstall()
    assert (sys.excepthook, threading.excepthook) == before
