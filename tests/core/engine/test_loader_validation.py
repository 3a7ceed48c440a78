"""A config.json that cannot match its weights is refused before anything is built.

mlx-lm instantiates every declared layer before it reads the weights: a config claiming
a million layers over 1.4 MB of safetensors drove RSS past 21 GB. The check reads only
the safetensors headers; the refusal is one short line.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from app.core.budget.memory_budget import BudgetSettings, memory_budget_bytes
from app.core.budget.weights_check import layers_in_weights
from app.core.engine import memory_guard
from app.core.engine.engine import Engine
from app.core.engine.loader import load_model_folder
from app.core.errors import BudgetError, ModelLoadError

ROOT = Path(__file__).resolve().parents[3]


def _copy_with_config(tiny_model_dir: Path, tmp_path: Path, **changes) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_layers_in_the_weights_are_counted_from_the_headers(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert layers_in_weights(tiny_model_dir) == config["num_hidden_layers"]


@pytest.mark.parametrize("layers", [10_000, 1_000_000])
def test_a_config_with_more_layers_than_its_weights_is_refused_in_one_line(
    tiny_model_dir, tmp_path, layers
):
    folder = _copy_with_config(tiny_model_dir, tmp_path, num_hidden_layers=layers)
    for attempt in (
        lambda: Engine().load(folder),
        lambda: load_model_folder(folder),
    ):
        with pytest.raises(ModelLoadError) as raised:
            attempt()
        message = str(raised.value)
        assert f"declares {layers:,} layers but the weights hold only 2" in message
        assert "\n" not in message and len(message) < 300


def test_the_refusal_comes_before_any_allocation(tiny_model_dir, tmp_path):
    """In a fresh process, loading the 1e6-layer config stays near start-up RSS."""
    folder = _copy_with_config(tiny_model_dir, tmp_path, num_hidden_layers=1_000_000)
    script = textwrap.dedent(
        f"""
        import resource, sys
        from app.core.engine.engine import Engine
        from app.core.errors import ModelLoadError
        engine = Engine()
        try:
            engine.load({str(folder)!r})
        except ModelLoadError as exc:
            print("refused", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        engine.shutdown()
        """
    )
    limit = 2 * 1024**3  # far below the 21.6 GB this once reached; fails fast if not
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(
            resource.RLIMIT_AS, (2 * limit, 2 * limit)
        ),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    word, peak_kib = result.stdout.split()
    assert word == "refused" and int(peak_kib) * 1024 < limit


@pytest.mark.parametrize(
    "model_type", ["cache", "base", "rope_utils", "../utils", "", 7, ["llama"]]
)
def test_a_model_type_that_is_no_model_is_refused(tiny_model_dir, tmp_path, model_type):
    folder = _copy_with_config(tiny_model_dir, tmp_path, model_type=model_type)
    with pytest.raises(ModelLoadError) as raised:
        load_model_folder(folder)
    message = str(raised.value)
    assert "model_type" in message or "not supported" in message
    assert "\n" not in message


@pytest.mark.parametrize("value", [0, -3, "2", 2.5, True])
def test_a_nonsense_layer_count_is_refused(tiny_model_dir, tmp_path, value):
    folder = _copy_with_config(tiny_model_dir, tmp_path, num_hidden_layers=value)
    with pytest.raises(
        ModelLoadError, match="num_hidden_layers must be a whole number"
    ):
        load_model_folder(folder)


def test_library_errors_are_cut_to_one_short_line(tiny_model_dir, tmp_path):
    # Fewer layers than the weights: mlx-lm's error lists every unexpected parameter.
    folder = _copy_with_config(tiny_model_dir, tmp_path, num_hidden_layers=1)
    with pytest.raises(ModelLoadError, match="cannot be loaded") as raised:
        load_model_folder(folder)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 500


def test_no_room_for_any_kv_cache_is_refused_before_loading(tiny_model_dir):
    """Weights that fit, but not one 256-token step of KV even at 4-bit."""
    weights = memory_guard.resident_weights_bytes(
        tiny_model_dir,
        json.loads((tiny_model_dir / "config.json").read_text()),
        memory_guard.profile_for_backend(False),
    )
    total = psutil.virtual_memory().total
    base = BudgetSettings()
    budget = memory_budget_bytes(total, base)
    # 1 KiB of room after the weights: less than 256 tokens of any precision.
    settings = BudgetSettings(
        reserve_bytes=base.reserve_bytes + budget - weights - 1024
    )
    engine = Engine(budget_settings=settings)
    with pytest.raises(BudgetError, match="no room for even 256 tokens of KV cache"):
        engine.load(tiny_model_dir)
    assert engine.model_info is None
    engine.shutdown()
