"""The seed's long-document experiment (`app.bench.parts.long_document`) at a tiny size."""

from __future__ import annotations

import json

from app.bench.runner import run_bench
from app.bench.settings import QUICK


def test_whole_reads_and_segments_are_measured_and_drawn(smoke_run):
    # The shared run at smoke sizes (tests/bench/conftest.py): 900 tokens, 3 segments.
    tmp_path, results, _ = smoke_run
    part = results["parts"]["long_document"]
    assert part["status"] == "ok", part.get("traceback")
    figures = part["figures"]
    for bits in ("16", "4"):
        whole = figures["whole"][bits]
        contexts = [p["context_tokens"] for p in whole["points"]]
        assert len(contexts) == 3 and contexts == sorted(contexts)
        assert contexts[-1] == whole["prompt_tokens"]  # read to the end
        assert whole["stopped"] is None
        kv = [p["kv_bytes"] for p in whole["points"]]
        assert kv == sorted(kv) and kv[0] > 0  # the cache grows with the context
    # 4-bit KV holds fewer bytes than 16-bit at the same context.
    assert (
        figures["whole"]["4"]["points"][-1]["kv_bytes"]
        < figures["whole"]["16"]["points"][-1]["kv_bytes"] / 3
    )
    segmented = figures["segmented"]
    assert segmented["segments"] == 3 and len(segmented["steps"]) == 3
    assert segmented["predicted_s"] > 0  # the plan's estimate, from a probe
    ratio = results["ratios"]["longdoc_segment_tps_last_vs_first"]
    assert ratio > 0
    assert results["targets_met"]["longdoc_segment_tps_last_vs_first"] == (ratio >= 0.9)
    assert results["ratios"]["longdoc_peak_segmented_vs_whole_16bit"] > 0
    assert (tmp_path / "longdoc_memory.png").stat().st_size > 10_000
    rows = [row["measurement"] for row in part["rows"]]
    assert any("read whole, 16-bit KV" in r for r in rows)
    assert any("last segment's tok/s" in r for r in rows)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["parts"]["long_document"]["figures"]["segmented"]["steps"]


def test_a_whole_read_stops_before_a_step_past_its_time_budget(
    tiny_model_dir, tmp_path
):
    settings = QUICK.with_changes(
        longdoc_tokens=900,
        longdoc_segments=3,
        longdoc_decode_tokens=6,
        longdoc_budget_s=0.001,
    )
    results = run_bench(
        tmp_path,
        tiny_model_dir,
        only="long_document",
        settings=settings,
        log=lambda _: None,
        command="swapless bench --only long_document",
    )
    whole = results["parts"]["long_document"]["figures"]["whole"]["16"]
    assert len(whole["points"]) == 1  # the first mark is always measured
    assert whole["stopped"].startswith("stopped before ")
    assert "past the 0 s budget" in whole["stopped"]
