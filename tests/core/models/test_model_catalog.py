"""Finding local models (Swapless, HF cache, LM Studio, added folders), verdicts, downloads."""

from __future__ import annotations

import json
import shutil
import struct
import threading

import pytest

from app.core.budget.memory_budget import GIB, BudgetSettings
from app.core.errors import InputError
from app.core.memory.snapshot import MemorySnapshot, PressureLevel
from app.core.models.model_catalog import (
    SOURCE_FOLDER,
    SOURCE_HUGGING_FACE,
    SOURCE_LM_STUDIO,
    SOURCE_SHIPPED,
    SOURCE_SWAPLESS,
    assess,
    find_models,
    hf_hub_cache,
    reference_model_folder,
)
from app.core.models.model_download import (
    DownloadCancelled,
    DownloadError,
    DownloadProgress,
    check_repo_id,
    download_model,
    target_folder,
)

CONFIG = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float16",
}


def model_folder(folder, config=CONFIG, tensor_bytes=4096):
    """A folder that looks like an mlx-lm model: config + a small safetensors file."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    header = json.dumps(
        {
            "w": {
                "dtype": "F16",
                "shape": [tensor_bytes // 2],
                "data_offsets": [0, tensor_bytes],
            }
        }
    ).encode()
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + bytes(tensor_bytes)
    )
    return folder


def snapshot(total=16 * GIB) -> MemorySnapshot:
    return MemorySnapshot(
        0.0, total, total // 2, 0, 0, 0.0, 0.0, PressureLevel.NORMAL, "test"
    )


@pytest.fixture
def layouts(tmp_path, swapless_home):
    """Models in every place the catalog looks, plus a GGUF folder it must skip."""
    home = tmp_path / "user"
    own = model_folder(swapless_home / "models" / "my-build")
    demo = model_folder(swapless_home / "models" / "demo")
    hub = tmp_path / "hf-home" / "hub"
    repo = hub / "models--mlx-community--Tiny-4bit"
    old = model_folder(repo / "snapshots" / "old")
    current = model_folder(repo / "snapshots" / "cafe")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("cafe")
    (hub / "models--someone--incomplete" / "snapshots" / "x").mkdir(parents=True)
    studio = model_folder(
        home / ".lmstudio" / "models" / "lmstudio-community" / "Tiny-MLX"
    )
    legacy = model_folder(home / ".cache" / "lm-studio" / "models" / "acme" / "Old-MLX")
    gguf = home / ".lmstudio" / "models" / "acme" / "Tiny-GGUF"
    gguf.mkdir(parents=True)
    (gguf / "tiny.gguf").write_bytes(b"GGUF")
    added = model_folder(tmp_path / "extra" / "nested" / "Mine")
    return {
        "home": home,
        "env": {"HF_HOME": str(tmp_path / "hf-home")},
        "own": own,
        "demo": demo,
        "old": old,
        "current": current,
        "studio": studio,
        "legacy": legacy,
        "added": tmp_path / "extra",
        "added_model": added,
    }


def test_finds_models_in_every_layout(layouts):
    models = find_models([layouts["added"]], env=layouts["env"], home=layouts["home"])
    by_path = {m.path: m for m in models}
    reference = reference_model_folder()
    assert set(by_path) == {
        reference,
        layouts["own"],
        layouts["demo"],
        layouts["current"],
        layouts["studio"],
        layouts["legacy"],
        layouts["added_model"],
    }
    assert by_path[layouts["current"]].name == "mlx-community/Tiny-4bit"
    assert by_path[layouts["current"]].source == SOURCE_HUGGING_FACE
    assert by_path[layouts["studio"]].name == "lmstudio-community/Tiny-MLX"
    assert by_path[layouts["studio"]].source == SOURCE_LM_STUDIO
    assert by_path[layouts["added_model"]].source == SOURCE_FOLDER
    assert by_path[layouts["added_model"]].name == "nested/Mine"
    assert by_path[layouts["demo"]].is_demo and not by_path[layouts["own"]].is_demo
    assert by_path[layouts["own"]].source == SOURCE_SWAPLESS
    assert by_path[layouts["own"]].size_bytes > 4096
    # The shipped reference model comes first, named for what it is.
    assert models[0].path == reference and models[0].is_reference
    assert models[0].name == "Reference model" and models[0].source == SOURCE_SHIPPED
    assert not any(m.is_reference for m in models[1:])
    # Sorted by source, then name.
    assert [m.source for m in models] == sorted(
        (m.source for m in models),
        key=[
            SOURCE_SHIPPED,
            SOURCE_SWAPLESS,
            SOURCE_HUGGING_FACE,
            SOURCE_LM_STUDIO,
            SOURCE_FOLDER,
        ].index,
    )


def test_hf_snapshot_without_a_ref_is_the_newest_complete_one(layouts):
    (layouts["current"].parents[1] / "refs" / "main").unlink()
    models = find_models(env=layouts["env"], home=layouts["home"])
    hub_models = [m for m in models if m.source == SOURCE_HUGGING_FACE]
    assert len(hub_models) == 1


def test_a_folder_found_twice_is_listed_once(layouts):
    models = find_models(
        [layouts["studio"], layouts["studio"].parent],
        env=layouts["env"],
        home=layouts["home"],
    )
    assert [m.path for m in models].count(layouts["studio"]) == 1


def test_hub_cache_location_honours_the_environment(tmp_path):
    home = tmp_path / "h"
    assert hf_hub_cache({}, home) == home / ".cache" / "huggingface" / "hub"
    assert (
        hf_hub_cache({"XDG_CACHE_HOME": "/x"}, home).as_posix() == "/x/huggingface/hub"
    )
    assert hf_hub_cache({"HF_HOME": "/hf"}, home).as_posix() == "/hf/hub"
    assert (
        hf_hub_cache({"HF_HOME": "/hf", "HF_HUB_CACHE": "/c"}, home).as_posix() == "/c"
    )


def test_missing_places_are_fine(tmp_path, swapless_home):
    found = find_models([tmp_path / "nowhere"], env={}, home=tmp_path / "nobody")
    assert [m.path for m in found] == [reference_model_folder()]  # always shipped


def test_the_verdict_comes_from_the_doctor(tmp_path):
    folder = model_folder(tmp_path / "m")
    verdict = assess(folder, BudgetSettings(), snapshot(), act_dtype_bytes=4)
    assert verdict.fits
    assert set(verdict.max_safe_context) == {"16", "8", "4"}
    assert (
        verdict.max_safe_context["4"]
        > verdict.max_safe_context["8"]
        > verdict.max_safe_context["16"]
    )
    assert verdict.summary.startswith("Fits. Max safe context: 16-bit ")
    assert "K tokens" in verdict.summary or "M tokens" in verdict.summary
    assert verdict.weights_bytes == 4096 * 2  # fp16 counted at fp32 on the CPU backend


def test_a_model_too_big_for_the_budget_does_not_fit(tmp_path):
    folder = model_folder(tmp_path / "m")
    verdict = assess(
        folder, BudgetSettings(), snapshot(total=2 * GIB), act_dtype_bytes=4
    )
    assert not verdict.fits and "memory budget" in verdict.summary


def test_a_precision_the_model_cannot_use_is_called_unavailable(tmp_path):
    folder = model_folder(tmp_path / "m", {**CONFIG, "hidden_size": 64})  # head_dim 16
    verdict = assess(folder, BudgetSettings(), snapshot(), act_dtype_bytes=4)
    assert verdict.fits and "8-bit unavailable, 4-bit unavailable" in verdict.summary


def test_an_unreadable_folder_gets_a_verdict_not_an_exception(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text("not json")
    verdict = assess(folder, BudgetSettings(), snapshot())
    assert not verdict.fits and verdict.summary.startswith("Cannot be read")
    assert verdict.report is None


# -- downloads ------------------------------------------------------------------------


def test_repo_ids_are_checked_and_urls_accepted():
    assert check_repo_id(" mlx-community/Qwen2.5-0.5B-Instruct-4bit ") == (
        "mlx-community/Qwen2.5-0.5B-Instruct-4bit"
    )
    assert check_repo_id("https://huggingface.co/acme/model/") == "acme/model"
    for bad in ("", "justaname", "a/b/c", "a b/c"):
        with pytest.raises(InputError, match="org/name"):
            check_repo_id(bad)


def test_offline_download_is_a_clear_error(swapless_home):
    with pytest.raises(DownloadError) as error:
        download_model("mlx-community/Tiny-4bit", endpoint="http://127.0.0.1:9")
    message = str(error.value)
    assert "Cannot reach the Hugging Face hub" in message
    assert "mlx-community/Tiny-4bit" in message and "add its folder" in message


def test_a_cancelled_download_says_so(swapless_home):
    cancel = threading.Event()
    cancel.set()
    # Cancelled before anything arrives: still no traceback, a DownloadCancelled.
    with pytest.raises((DownloadCancelled, DownloadError)):
        download_model("acme/model", cancel=cancel, endpoint="http://127.0.0.1:9")


def test_downloads_go_under_swapless_home(swapless_home):
    assert target_folder("acme/tiny") == swapless_home / "models" / "acme--tiny"


def test_progress_fraction():
    assert DownloadProgress(50, 200, 1, 4).fraction == 0.25
    assert DownloadProgress(0, 0, 1, 4).fraction == 0.25
    assert DownloadProgress(0, 0, 0, 0).fraction is None


def test_the_tiny_model_is_found_and_fits(tiny_model_dir, tmp_path, swapless_home):
    shutil.copytree(tiny_model_dir, swapless_home / "models" / "tiny")
    (model,) = [m for m in find_models(env={}, home=tmp_path) if not m.is_reference]
    assert model.name == "tiny"
    verdict = assess(model.path, BudgetSettings(), snapshot())
    assert verdict.fits and verdict.report["model"]["layers"] == 2


def test_usable_context_is_capped_by_the_trained_context_and_says_so(tmp_path):
    folder = model_folder(tmp_path / "m", {**CONFIG, "max_position_embeddings": 2048})
    verdict = assess(folder, BudgetSettings(), snapshot(), act_dtype_bytes=4)
    assert verdict.fits and verdict.trained_context == 2048
    assert verdict.max_safe_context["16"] > 2048  # memory alone would allow more
    assert all(verdict.usable_context(b) == 2048 for b in ("16", "8", "4"))
    assert all(verdict.capped_by_training(b) for b in ("16", "8", "4"))
    assert verdict.summary == (
        "Fits. Usable context: 2K tokens at 16/8/4-bit, the context the model was "
        "trained for (memory would allow more)."
    )


def test_the_demo_is_recognised_by_its_config(tiny_model_dir, tmp_path):
    from app.core.models.model_catalog import has_random_weights

    assert has_random_weights(tiny_model_dir)
    assert not has_random_weights(model_folder(tmp_path / "real"))
    assert not has_random_weights(tmp_path / "missing")


def test_a_precision_limited_by_memory_keeps_its_own_figure(tmp_path):
    folder = model_folder(tmp_path / "m", {**CONFIG, "max_position_embeddings": 2**30})
    verdict = assess(folder, BudgetSettings(), snapshot(), act_dtype_bytes=4)
    safe = verdict.max_safe_context
    assert safe["16"] < 2**30  # memory, not training, limits every precision here
    assert not any(verdict.capped_by_training(b) for b in ("16", "8", "4"))
    assert verdict.usable_context("16") == safe["16"]
    assert "(trained context)" not in verdict.summary
