"""Load the packaging scripts, which live outside the `app` package, as modules.

``packaging/`` is not a Python package (a folder of that name on ``sys.path`` would
shadow the PyPI ``packaging`` distribution), so each script is loaded from its path
under a name of its own.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"


def load_script(relative: str):
    """Import ``packaging/<relative>`` as ``swapless_packaging_<stem>``."""
    path = PACKAGING / relative
    name = f"swapless_packaging_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def bundle_info():
    return load_script("bundle_info.py")


@pytest.fixture(scope="session")
def bundle_checks():
    return load_script("bundle_checks.py")


@pytest.fixture(scope="session")
def icons():
    return load_script("icons.py")


@pytest.fixture(scope="session")
def desktop():
    return load_script("linux/desktop_entry.py")
