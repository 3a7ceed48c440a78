"""The native kernel built once for the CPU-backend tests, or their skip with the reason."""

from __future__ import annotations

import pytest

from app.core.engine.cpu import native_build, native_kernel


@pytest.fixture(scope="session")
def native_built():
    """Build the kernel (or find it built); skip the test where it cannot be."""
    built = native_build.build()
    if built.path is None:
        pytest.skip(f"native kernel unavailable: {built.reason}")
    return built


@pytest.fixture(scope="module")
def kernel(native_built):
    """The built kernel's module; its path, algebra and thread switches back to the
    defaults after the module's tests (which force them)."""
    module = native_kernel.load_module()
    assert module is not None
    yield module
    module.force_path("auto")
    module.force_algebra(None)
    module.set_threads(1)
