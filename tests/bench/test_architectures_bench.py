"""The per-architecture benchmark part, on two architectures at smoke sizes."""

from __future__ import annotations

import json


def test_a_row_per_architecture_with_reuse_trim_and_bytes(smoke_run):
    # The shared run at smoke sizes (tests/bench/conftest.py): one recurrent hybrid
    # and one full-attention model keep it short; the real run covers every one.
    tmp_path, data, _ = smoke_run
    part = data["parts"]["architectures"]
    assert part["status"] == "ok", part
    by_arch = part["figures"]["by_arch"]
    assert set(by_arch) == {"qwen3_5", "qwen3"}
    hybrid, plain = by_arch["qwen3_5"], by_arch["qwen3"]
    # The hybrid resumes from a state checkpoint and rebuilds on a trim; the
    # full-attention model trims and splices.
    assert hybrid["reuse"]["rewind"] in ("checkpoint", "none")
    assert hybrid["trim"]["method"] == "rebuild from checkpoint"
    assert plain["trim"]["method"] == "splice"
    for found in by_arch.values():
        assert min(found["reuse"]["reused_tokens"]) > 0
        assert found["kv_bytes"] == {"16": 1.0, "8": 1.0}
        assert found["trim"]["held_after"] < found["trim"]["held_before"]
    assert hybrid["checkpoint_bytes"] > 0 == plain["checkpoint_bytes"]
    ratios = data["ratios"]
    assert set(ratios["arch_turn_reuse_vs_reprefill"]) == {"qwen3_5", "qwen3"}
    assert data["targets_met"]["arch_kv_bytes_measured_vs_predicted"] is True
    table = (tmp_path / "results.md").read_text()
    assert "qwen3_5 (1 full attention + 3 constant-state)" in table
    assert json.loads((tmp_path / "results.json").read_text())["parts"]["architectures"]
