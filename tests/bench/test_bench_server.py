"""The server benchmark part end to end on the tiny model, at the smallest sizes."""

from __future__ import annotations

from app.bench.runner import run_bench
from app.bench.settings import QUICK

TINY = QUICK.with_changes(
    overhead_prompt_tokens=64,
    overhead_decode_tokens=16,
    server_pairs=2,
    server_reuse_tokens=256,
    server_reuse_pairs=2,
)


def test_server_part_measures_both_ratios(tiny_model_dir, tmp_path):
    results = run_bench(
        tmp_path,
        tiny_model_dir,
        only="server",
        settings=TINY,
        log=lambda _: None,
        plots=False,
    )
    part = results["parts"]["server"]
    assert part["status"] == "ok", part.get("traceback")
    for key in ("server_vs_engine", "server_reuse_vs_fresh"):
        assert results["ratios"][key] > 0
        assert results["ratio_stats"][key]["n"] == 2
        assert isinstance(results["targets_met"][key], bool)
    decode = part["figures"]["decode"]
    assert decode["same_greedy_text"]
    # The loop may merge deltas that wait for it, never add any.
    assert all(0 < n <= 16 for n in decode["server_pieces"])
    reuse = part["figures"]["reuse"]
    # The reuse runs really continued the first request's cache; fresh ones did not.
    prompt = reuse["prompt_tokens"]
    assert all(c > 0.8 * prompt for c in reuse["reuse_cached_tokens"])
    assert reuse["fresh_cached_tokens"] == [0, 0]
    assert "Decode tok/s through the server" in (tmp_path / "results.md").read_text()
