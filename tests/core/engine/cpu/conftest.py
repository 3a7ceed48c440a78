"""The native kernel built once for the CPU-backend tests, or their skip with the reason."""

from __future__ import annotations

import pytest

from app.core.engine.cpu import native_build


@pytest.fixture(scope="session")
def native_built():
    """Build the kernel (or find it built); skip the test where it cannot be."""
    built = native_build.build()
    if built.path is None:
        pytest.skip(f"native kernel unavailable: {built.reason}")
    return built
