"""The trained reference model, copied once per session from the committed weights."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def reference_model_dir(tmp_path_factory):
    """A copy of the committed reference model (resources/quality/reference-model)."""
    from app.core.modelkit.reference.install import install_reference_model

    return install_reference_model(tmp_path_factory.mktemp("models") / "reference")


@pytest.fixture(scope="module")
def reference_engine(reference_model_dir):
    """A real engine with the reference model loaded, shared by one test module."""
    from app.core.engine.engine import Engine

    engine = Engine()
    engine.load(reference_model_dir)
    yield engine
    engine.shutdown()
