"""The `structured` bench part end to end on the tiny model (the shared smoke run)."""

from __future__ import annotations

import json

from app.bench.settings import SMOKE


def test_structured_part_reports_the_ratio_compile_time_and_reuse(smoke_run):
    # A smaller tool set than the real bench's 20 (SMOKE.structured_tools): the same
    # path, seconds not minutes.
    out, results, _ = smoke_run
    part = results["parts"]["structured"]
    assert part["status"] == "ok", part
    assert results["ratios"]["structured_vs_free"] > 0
    assert results["ratios"]["lazy_call_vs_free"] > 0
    data = json.loads((out / "results.json").read_text())
    figures = data["parts"]["structured"]["figures"]
    assert figures["tools"] == SMOKE.structured_tools == 2
    assert figures["tool_grammar_compile_s"] > 0
    # The second conversation took the definitions from the prefix cache.
    assert figures["tools_prompt_tokens"] > 400
    assert figures["tools_warm_reused_tokens"] > figures["tools_prompt_tokens"] - 20
    assert figures["lazy_ratio"]["n"] == SMOKE.overhead_pairs
    assert figures["lazy_call_decode_tps"]["min"] > 0
    report = (out / "results.md").read_text()
    assert "Grammar compile, 2 tools" in report
    assert "inside a call the model opened" in report
