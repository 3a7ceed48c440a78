"""`swapless doctor --model DIR --json` against hand arithmetic, for the 2026 families.

Each case is a config folder written by hand from the published config
(tests/data/configs/README.md) plus a tiny safetensors header. The figures below are
worked out by hand from the config's fields, per layer kind:

* full attention grows: layers x 2 (K, V) x KV heads x head size x bytes per element;
  8/4-bit: per head and token, head size x bits / 8 bytes plus a scale and a bias per
  64 elements in the activation dtype;
* sliding windows are bounded: layers x window x the same per-token bytes, unquantized;
* recurrent state is constant: its elements x the activation dtype (Gated DeltaNet's
  recurrence is float32 whatever the dtype), which on the CPU backend is wider than
  the cache's (float32 activations, 16-bit KV);
* the fixed part the budget sets aside is the bounded bytes plus 3 checkpoints of them.

The widths are the runtime's, read from the report (``act_dtype_bytes``: the cache's
floats, 2 bytes on the CPU backend and the config's on Metal; ``state_dtype_bytes``:
recurrent state, 4 on the CPU backend), so the same arithmetic holds on both.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import struct
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from app.cli.main import build_parser

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"


def q(dim: int, bits: int, act: int, group: int = 64) -> int:
    """Bytes of one quantized head-vector: packed bits plus a scale and bias per group."""
    return dim * bits // 8 + 2 * act * (dim // group)


def gpt_oss_20b(act, state=None):
    # 24 layers alternating sliding/full: 12 full + 12 sliding (window 128), 8 KV heads
    # x head_dim 64.
    return {
        "kinds": {"full_attention": 12, "sliding_attention": 12},
        "per_token": {
            16: 12 * 2 * 8 * 64 * act,
            8: 12 * 2 * 8 * q(64, 8, act),
            4: 12 * 2 * 8 * q(64, 4, act),
        },
        "bounded": 12 * 128 * 2 * 8 * 64 * act,
    }


def qwen3_8b(act, state=None):
    # 36 full layers, 8 KV heads x 128.
    return {
        "kinds": {"full_attention": 36},
        "per_token": {
            16: 36 * 2 * 8 * 128 * act,
            8: 36 * 2 * 8 * q(128, 8, act),
            4: 36 * 2 * 8 * q(128, 4, act),
        },
        "bounded": 0,
    }


def qwen3_6_35b_a3b(act, state=None):
    state = state or act
    # 40 layers, full_attention_interval 4: 10 full (2 KV heads x 256) + 30 Gated
    # DeltaNet layers. Each keeps a convolution state of (4 - 1) steps of q, k, v =
    # 3 x (2 x 16 x 128 + 32 x 128) elements in the activation dtype, and a float32
    # recurrence of 32 value heads x 128 x 128.
    linear = 3 * (2 * 16 * 128 + 32 * 128) * state + 32 * 128 * 128 * 4
    return {
        "kinds": {"full_attention": 10, "constant_state": 30},
        "per_token": {
            16: 10 * 2 * 2 * 256 * act,
            8: 10 * 2 * 2 * q(256, 8, act),
            4: 10 * 2 * 2 * q(256, 4, act),
        },
        "bounded": 30 * linear,
    }


def qwen3_5_0_8b(act, state=None):
    state = state or act
    # Geometry from the model card: 24 layers = 6 x (3 Gated DeltaNet + 1 full), 16 QK
    # and 16 V linear heads of 128; 2 KV heads of 256 in the full layers.
    linear = 3 * (2 * 16 * 128 + 16 * 128) * state + 16 * 128 * 128 * 4
    return {
        "kinds": {"full_attention": 6, "constant_state": 18},
        "per_token": {
            16: 6 * 2 * 2 * 256 * act,
            8: 6 * 2 * 2 * q(256, 8, act),
            4: 6 * 2 * 2 * q(256, 4, act),
        },
        "bounded": 18 * linear,
    }


def gemma_4_31b(act, state=None):
    # 60 layers, 5 sliding : 1 global. Sliding: 16 KV heads x 256, window 1024.
    # Global layers use attention_k_eq_v with num_global_key_value_heads 4 of
    # global_head_dim 512 (keys and values are still both cached).
    return {
        "kinds": {"full_attention": 10, "sliding_attention": 50},
        "per_token": {
            16: 10 * 2 * 4 * 512 * act,
            8: 10 * 2 * 4 * q(512, 8, act),
            4: 10 * 2 * 4 * q(512, 4, act),
        },
        "bounded": 50 * 1024 * 2 * 16 * 256 * act,
    }


def gemma_4_e2b(act, state=None):
    # 35 layers, 4 sliding : 1 global, but the last 20 reuse earlier layers' KV and
    # have no cache: the 15 cached layers are 3 x (4 sliding + 1 global). One KV head;
    # sliding head 256, window 512; global head 512.
    return {
        "kinds": {"full_attention": 3, "sliding_attention": 12},
        "per_token": {
            16: 3 * 2 * 1 * 512 * act,
            8: 3 * 2 * 1 * q(512, 8, act),
            4: 3 * 2 * 1 * q(512, 4, act),
        },
        "bounded": 12 * 512 * 2 * 1 * 256 * act,
    }


def granite_4_h_small(act, state=None):
    state = state or act
    # 40 layers: 4 attention (8 KV heads, head size hidden / heads = 4096 / 32 = 128)
    # and 36 Mamba-2 layers, each keeping (d_conv 4 - 1) steps of the convolution input
    # (128 heads x 64 + 2 x 1 group x 128 state) and a 128 x 64 x 128 SSM state.
    # Only the count of attention layers enters (their positions do not).
    mamba = (3 * (128 * 64 + 2 * 128) + 128 * 64 * 128) * state
    return {
        "kinds": {"full_attention": 4, "constant_state": 36},
        "per_token": {
            16: 4 * 2 * 8 * 128 * act,
            8: 4 * 2 * 8 * q(128, 8, act),
            4: 4 * 2 * 8 * q(128, 4, act),
        },
        "bounded": 36 * mamba,
    }


def lfm2_1_2b(act, state=None):
    state = state or act
    # 16 layers: attention at [2, 5, 8, 10, 12, 14] (8 KV heads, head size 2048 / 32 =
    # 64), short convolutions elsewhere keeping (L_cache 3 - 1) x 2048 elements.
    return {
        "kinds": {"full_attention": 6, "constant_state": 10},
        "per_token": {
            16: 6 * 2 * 8 * 64 * act,
            8: 6 * 2 * 8 * q(64, 8, act),
            4: 6 * 2 * 8 * q(64, 4, act),
        },
        "bounded": 10 * 2 * 2048 * state,
    }


CASES = {
    "gpt-oss-20b": gpt_oss_20b,
    "qwen3-8b": qwen3_8b,
    "qwen3.6-35b-a3b": qwen3_6_35b_a3b,
    "qwen3.5-0.8b": qwen3_5_0_8b,
    "gemma-4-31b-it": gemma_4_31b,
    "gemma-4-e2b-it": gemma_4_e2b,
    "granite-4.0-h-small": granite_4_h_small,
    "lfm2-1.2b": lfm2_1_2b,
}


def folder_for(tmp_path: Path, name: str) -> Path:
    """A model folder: the stored config and a two-tensor safetensors file."""
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(CONFIGS / f"{name}.json", folder / "config.json")
    header = json.dumps(
        {"embed": {"dtype": "BF16", "shape": [16, 8], "data_offsets": [0, 256]}}
    ).encode()
    (folder / "model.safetensors").write_bytes(
        struct.pack("<Q", len(header)) + header + bytes(256)
    )
    return folder


def doctor_json(folder: Path) -> dict:
    """Run `swapless doctor --model DIR --json` through the real command line parser."""
    args = build_parser().parse_args(["doctor", "--model", str(folder), "--json"])
    out = io.StringIO()
    with redirect_stdout(out):
        assert args.run(args) == 0
    return json.loads(out.getvalue())


def safe_context(report: dict, per_token: int, fixed: int) -> int:
    """The budget formula by hand: (cap x RAM - reserve - weights - fixed) x 0.6."""
    s = report["settings"]
    room = (
        int(report["device"]["total_bytes"] * s["memory_cap_fraction"])
        - s["reserve_bytes"]
        - report["model"]["weights_bytes"]
        - fixed
    )
    return math.floor(room * s["safety_factor"] / per_token) // 256 * 256


@pytest.mark.parametrize("name", sorted(CASES))
def test_doctor_json_matches_the_hand_figures(tmp_path, name):
    report = doctor_json(folder_for(tmp_path, name))
    act = report["model"]["act_dtype_bytes"]
    expected = CASES[name](act, report["model"]["state_dtype_bytes"])
    assert report["kv_errors"] == {}
    counts = {}
    for row in report["kv_layers"]["16"]:
        counts[row["kind"]] = counts.get(row["kind"], 0) + row["layers"]
    assert counts == expected["kinds"]
    fixed = expected["bounded"] * (1 + 3)
    assert report["fixed_kv"] == {
        "bounded_bytes": expected["bounded"],
        "checkpoints": 3 if expected["bounded"] else 0,
        "checkpoint_bytes_each": expected["bounded"],
        "total_bytes": fixed,
    }
    for bits in (16, 8, 4):
        per_token = expected["per_token"][bits]
        assert report["kv_bytes_per_token"][str(bits)] == per_token, bits
        # 8192 tokens is a whole number of 256-token steps; windows are full by then.
        at_8k = report["kv_bytes_by_context"][str(bits)]["8192"]
        assert at_8k == 8192 * per_token + expected["bounded"], bits
        assert report["max_safe_context"][str(bits)] == safe_context(
            report, per_token, fixed
        )
        # Only full-attention layers take the requested precision.
        for row in report["kv_layers"][str(bits)]:
            wanted = bits if row["kind"] == "full_attention" else 16
            assert row["bits"] == wanted, (bits, row)


def test_qwen3_5_moe_is_no_longer_counted_as_all_full_attention(tmp_path):
    # What issue 16 found: 40 full-attention layers (4x the bytes per token) and no
    # recurrent state. Now 10 growing layers and 30 constant ones.
    report = doctor_json(folder_for(tmp_path, "qwen3.6-35b-a3b"))
    act = report["model"]["act_dtype_bytes"]
    assert report["kv_bytes_per_token"]["16"] * 4 == 40 * 2 * 2 * 256 * act
    assert report["model"]["state_layers"] == 30


def test_gemma4_shared_layers_are_explained(tmp_path):
    report = doctor_json(folder_for(tmp_path, "gemma-4-e2b-it"))
    assert report["model"]["layers"] == 35
    assert any("reuse the keys and values" in note for note in report["model"]["notes"])


def test_the_real_command_prints_the_same_json(tmp_path):
    folder = folder_for(tmp_path, "granite-4.0-h-small")
    result = subprocess.run(
        [sys.executable, "-m", "app", "doctor", "--model", str(folder), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    act = report["model"]["act_dtype_bytes"]
    assert report["kv_bytes_per_token"]["8"] == 4 * 2 * 8 * q(128, 8, act)
    state = report["model"]["state_dtype_bytes"]
    assert (
        report["fixed_kv"]["bounded_bytes"] == granite_4_h_small(act, state)["bounded"]
    )


def test_text_report_names_each_layer_kind_and_its_precision(tmp_path):
    args = build_parser().parse_args(
        ["doctor", "--model", str(folder_for(tmp_path, "gpt-oss-20b"))]
    )
    out = io.StringIO()
    with redirect_stdout(out):
        assert args.run(args) == 0
    text = out.getvalue()
    assert "full attention: 12 layers, 8 KV heads x 64" in text
    assert "sliding window: 12 layers, 8 KV heads x 64, window 128 tokens" in text
    assert "checkpoints: 3 x" in text
    assert "quantizes the full-attention layers only" in text
