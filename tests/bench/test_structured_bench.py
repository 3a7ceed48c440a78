"""The `structured` bench part end to end on the tiny model."""

from __future__ import annotations

import json

from app.bench.parts.serving import structured
from app.bench.runner import run_bench
from app.bench.settings import QUICK

TINY = QUICK.with_changes(
    overhead_pairs=2, overhead_prompt_tokens=64, overhead_decode_tokens=16
)


def test_structured_part_reports_the_ratio_compile_time_and_reuse(
    tiny_model_dir, tmp_path, monkeypatch
):
    # A smaller tool set than the real bench's 20: the same path, seconds not minutes.
    monkeypatch.setattr(structured, "TOOL_COUNT", 4)
    monkeypatch.setattr(structured, "DESCRIPTION_REPEATS", 2)
    results = run_bench(
        tmp_path,
        tiny_model_dir,
        only="structured",
        settings=TINY,
        log=lambda _: None,
        command="swapless bench --only structured",
    )
    part = results["parts"]["structured"]
    assert part["status"] == "ok", part
    assert results["ratios"]["structured_vs_free"] > 0
    data = json.loads((tmp_path / "results.json").read_text())
    figures = data["parts"]["structured"]["figures"]
    assert figures["tools"] == 4 and figures["tool_grammar_compile_s"] > 0
    # The second conversation took the definitions from the prefix cache.
    assert figures["tools_prompt_tokens"] > 400
    assert figures["tools_warm_reused_tokens"] > figures["tools_prompt_tokens"] - 20
    assert "Grammar compile, 4 tools" in (tmp_path / "results.md").read_text()
