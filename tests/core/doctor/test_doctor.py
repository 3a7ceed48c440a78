"""The doctor report: built from config.json, safetensors headers and a snapshot."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from app.core.budget.memory_budget import GIB, BudgetSettings
from app.core.doctor.doctor import build_report, format_report
from app.core.errors import ModelLoadError
from app.core.memory.snapshot import MemorySnapshot, PressureLevel

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
SOURCE = "Linux PSI some avg10=0.00 full avg10=0.00 + available memory 75%"


def snapshot(total=16 * GIB, available=12 * GIB) -> MemorySnapshot:
    return MemorySnapshot(
        time=0.0,
        total_bytes=total,
        available_bytes=available,
        swap_total=0,
        swap_used=0,
        swap_in_rate=0.0,
        swap_out_rate=0.0,
        pressure=PressureLevel.NORMAL,
        pressure_source=SOURCE,
        psi_some_avg10=0.0,
        psi_full_avg10=0.0,
        process_rss=100 << 20,
    )


def model_folder(tmp_path, name: str, config: dict | None = None) -> Path:
    """A model folder with a stored config and a small hand-written safetensors file."""
    folder = tmp_path / name
    folder.mkdir()
    if config is None:
        shutil.copy(CONFIGS / f"{name}.json", folder / "config.json")
    else:
        (folder / "config.json").write_text(json.dumps(config))
    header = json.dumps(
        {
            "embed": {"dtype": "BF16", "shape": [16, 8], "data_offsets": [0, 256]},
            "packed": {"dtype": "U32", "shape": [4], "data_offsets": [256, 272]},
        }
    ).encode()
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + bytes(272)
    )
    return folder


def test_device_only_report():
    report = build_report(None, BudgetSettings(), snapshot())
    assert set(report) == {"device", "settings"}
    assert report["device"]["pressure"] == "normal"
    assert report["settings"]["budget_bytes"] == 10 * GIB
    text = format_report(report)
    assert "16.0 GiB total, 12.0 GiB available (75%)" in text
    assert SOURCE in text
    assert "per token" not in text and "Model" not in text
    json.dumps(report)


def test_llama_report_with_injected_weights(tmp_path):
    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    report = build_report(
        folder, BudgetSettings(), snapshot(), weights_bytes=int(4.5 * GIB)
    )
    assert report["kv_bytes_per_token"] == {"16": 131_072, "8": 69_632, "4": 36_864}
    assert report["kv_bytes_by_context"]["16"] == {
        "1024": 1024 * 131_072,
        "8192": 8192 * 131_072,
        "32768": 32768 * 131_072,
        "131072": 131072 * 131_072,
    }
    assert report["kv_bytes_by_context"]["4"]["1024"] == 1024 * 36_864
    # (10 GiB budget - 4.5 GiB weights) x 0.6 / bytes per token, in whole 256 steps.
    assert report["max_safe_context"] == {"16": 26_880, "8": 50_688, "4": 96_000}
    assert report["kv_errors"] == {}
    model = report["model"]
    assert (model["layers"], model["kv_heads"], model["head_dim"]) == (32, 8, 128)
    assert model["dtype"] == "bfloat16"
    assert model["weights_bytes"] == int(4.5 * GIB)
    json.dumps(report)


def test_weights_come_from_the_safetensors_headers(tmp_path):
    folder = model_folder(tmp_path, "qwen2.5-0.5b-instruct")
    report = build_report(folder, BudgetSettings(), snapshot())
    assert report["model"]["weights_bytes"] == 272
    # On the CPU backend (float32) the bf16 tensor doubles; packed words do not.
    cpu = build_report(folder, BudgetSettings(), snapshot(), act_dtype_bytes=4)
    assert cpu["model"]["weights_bytes"] == 512 + 16
    assert cpu["kv_bytes_per_token"]["16"] == 2 * 12_288


def test_gemma3_report_counts_sliding_windows_at_float32(tmp_path):
    folder = model_folder(tmp_path, "gemma-3-4b-it")
    report = build_report(folder, BudgetSettings(), snapshot(), act_dtype_bytes=4)
    assert report["kv_bytes_per_token"]["16"] == 40_960
    # 8192 tokens in 5 global layers + 29 sliding layers capped at 1024 tokens.
    assert (
        report["kv_bytes_by_context"]["16"]["8192"] == 8192 * 40_960 + 29 * 1024 * 8192
    )
    assert report["model"]["sliding_layers"] == 29
    assert "5 full attention + 29 sliding (1024)" in format_report(report)


def test_precision_the_model_cannot_use_is_reported(tmp_path):
    config = json.loads((CONFIGS / "qwen2.5-0.5b-instruct.json").read_text())
    config["hidden_size"] = 448  # head_dim 32: group 64 cannot divide it
    folder = model_folder(tmp_path, "small-heads", config)
    report = build_report(folder, BudgetSettings(), snapshot())
    assert report["kv_bytes_per_token"]["16"] == 2 * 24 * 2 * 32 * 2
    assert report["kv_bytes_per_token"]["8"] is None
    assert report["max_safe_context"]["4"] is None
    assert "valid group sizes for this model: 32" in report["kv_errors"]["8"]
    text = format_report(report)
    assert "unavailable (see notes)" in text
    assert "8-bit KV unavailable" in text


def test_formatted_report_explains_everything(tmp_path):
    folder = model_folder(tmp_path, "mistral-7b-v0.1")
    report = build_report(
        folder, BudgetSettings(), snapshot(), weights_bytes=int(4.5 * GIB)
    )
    text = format_report(report)
    for expected in (
        "Device",
        "Pressure now",
        "normal (" + SOURCE + ")",
        "Swap",
        "none configured",
        "32 query heads, 8 KV heads, head dim 128",
        "bfloat16",
        "4.5 GiB in memory",
        "Trained context   32,768 tokens",
        "per token",
        "128K",
        "max safe context",
        "128.0 KiB",
        "26,880 tokens",
        "sliding window (4096)",  # the note about mlx-lm ignoring it
        "memory cap 75%",
        "reserve 2.0 GiB",
        "safety factor 0.6",
        "config.json",
    ):
        assert expected in text, expected


def test_unusable_model_folder(tmp_path):
    with pytest.raises(ModelLoadError):
        build_report(tmp_path, BudgetSettings(), snapshot())


def test_a_config_that_cannot_belong_to_its_weights_is_refused_from_the_headers(
    tmp_path, tiny_model_dir
):
    # The headers name 2 layers; a config declaring a million used to make the doctor
    # build a million-layer geometry (41 s) and answer "max safe context 0".
    folder = tmp_path / "huge-config"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 1_000_000
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(
        ModelLoadError, match="declares 1,000,000 layers but the weights"
    ):
        build_report(folder, BudgetSettings(), snapshot())


def test_aged_presets_get_exact_bytes_per_tier_and_their_own_limit(tmp_path):
    from app.core.budget.aged_budget import aged_kv_bytes_at, aged_max_safe_context
    from app.core.budget.model_geometry import read_geometry
    from app.core.presets.generation_settings import KVAging

    folder = model_folder(tmp_path, "llama-3.1-8b-instruct")
    aging = KVAging(
        recent_tokens=512,
        band_tokens=2048,
        band_key_bits=8,
        band_value_bits=4,
        floor_key_bits=4,
        floor_value_bits=4,
    )
    report = build_report(
        folder,
        BudgetSettings(),
        snapshot(),
        weights_bytes=int(4.5 * GIB),
        aged={"long-aged": (aging, 64)},
    )
    entry = report["kv_aged"]["long-aged"]
    geometry = read_geometry(folder)
    assert entry["aging"] == aging.spec and entry["error"] is None
    for n, figures in entry["by_context"].items():
        assert figures["total_bytes"] == aged_kv_bytes_at(geometry, int(n), aging, 64)
        assert sum(t["nbytes"] for t in figures["tiers"]) == figures["total_bytes"]
        assert sum(t["tokens"] for t in figures["tiers"]) == int(n)
    assert entry["max_safe_context"] == aged_max_safe_context(
        16 * GIB, int(4.5 * GIB), geometry, aging, 64, BudgetSettings()
    )
    # More context fits than at 8-bit, less than at uniform 4-bit (the exact tokens).
    assert report["max_safe_context"]["8"] < entry["max_safe_context"]
    assert entry["max_safe_context"] < report["max_safe_context"]["4"]
    text = format_report(report)
    assert "Aged KV cache" in text
    assert "long-aged: 512 exact, 2,048 at K8/V4, then 4-bit (group 64)" in text
    assert "8K: " in text and "5,632 4-bit" in text
    json.dumps(report)
