"""The Markdown tests check their HTML through Qt's own rich-text engine, and the
spec-example tests report their pass rates at the end of every run (`make test`).

`QTextDocument` needs a Qt application for its fonts: without one PySide6 6.11 crashes
the process (6.12 happened not to). pytest-qt's ``qapp`` makes one per session.
"""

from __future__ import annotations

import pytest

_SPEC_SUMMARY = pytest.StashKey[list[str]]()


@pytest.fixture(autouse=True)
def _qt_application(qapp):
    return qapp


@pytest.fixture
def spec_summary(pytestconfig) -> list[str]:
    """Lines to print in the run's closing summary."""
    return pytestconfig.stash.setdefault(_SPEC_SUMMARY, [])


def pytest_terminal_summary(terminalreporter, config):
    lines = config.stash.get(_SPEC_SUMMARY, [])
    if lines:
        terminalreporter.section("Markdown spec examples")
        for line in lines:
            terminalreporter.write_line(line)
