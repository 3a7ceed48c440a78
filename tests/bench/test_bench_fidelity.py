"""The benchmark's fidelity section: quality next to KV bytes, on the reference model."""

from __future__ import annotations

import json


def test_fidelity_rows_have_their_kv_bytes_and_the_plot_is_drawn(smoke_run):
    # The shared run at smoke sizes (tests/bench/conftest.py): `fidelity.SMOKE_SIZES`.
    tmp_path, results, _ = smoke_run
    part = results["parts"]["fidelity"]
    assert part["status"] == "ok", part.get("traceback")
    figures = part["figures"]
    cells = {cell["cell"]: cell for cell in figures["cells"]}
    assert set(cells) >= {"kv:8:64", "kv:4:64", "trim:splice", "trim:none"}
    eight, four = cells["kv:8:64"], cells["kv:4:64"]
    assert four["kv_bytes_at_context"] < eight["kv_bytes_at_context"]
    assert eight["kv_bytes_at_context"] < (
        figures["full_precision_bytes_per_token"] * figures["bytes_at_tokens"]
    )
    assert cells["trim:splice"]["trim_kv_bytes"] < cells["trim:none"]["trim_kv_bytes"]
    assert set(figures["dropped_fact_recall"]) == {"extractive", "model"}
    assert figures["reference_perplexity"] > 1
    rows = [row["measurement"] for row in part["rows"]]
    assert any("the extractive summary" in row for row in rows)
    assert "recall_vs_kv_bytes.png" in results["files"]
    assert (tmp_path / "recall_vs_kv_bytes.png").stat().st_size > 10_000
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["parts"]["fidelity"]["figures"]["bytes_at_tokens"] == 4096
