"""Fixtures for the budget tests: the public model configs in tests/data/configs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from app.core.budget.model_geometry import ModelGeometry, geometry_from_config

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"


@pytest.fixture
def config():
    """Load a config dict by file stem, e.g. ``config("llama-3.1-8b-instruct")``."""

    def load(name: str) -> dict:
        return json.loads((CONFIGS / f"{name}.json").read_text())

    return load


@pytest.fixture
def geometry(config):
    """Build the geometry of a stored config by file stem."""

    def build(name: str) -> ModelGeometry:
        return geometry_from_config(config(name), source=name)

    return build


@pytest.fixture
def model_dir(tmp_path):
    """Copy a stored config into a fresh model folder and return the folder."""

    def make(name: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        shutil.copy(CONFIGS / f"{name}.json", folder / "config.json")
        return folder

    return make


@pytest.fixture
def mlx_lm_kv_storage():
    """mlx-lm's caches storing keys and values as they arrive (float32 here), as these
    tests describe them, whatever an earlier test's model load installed."""
    from app.core.engine.cache import kv_storage

    with kv_storage.storing(None):
        yield
