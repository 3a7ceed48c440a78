"""The Markdown tests check their HTML through Qt's own rich-text engine.

`QTextDocument` needs a Qt application for its fonts: without one PySide6 6.11 crashes
the process (6.12 happened not to). pytest-qt's ``qapp`` makes one per session.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _qt_application(qapp):
    return qapp
