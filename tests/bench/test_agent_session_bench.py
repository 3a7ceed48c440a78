"""The agent-session benchmark part end to end on the tiny model, at a small size."""

from __future__ import annotations

import pytest

from app.bench.runner import run_bench
from app.bench.settings import QUICK


@pytest.mark.slow  # starts mlx_lm.server in a subprocess
def test_agent_session_replays_on_both_servers(tiny_model_dir, tmp_path):
    results = run_bench(
        tmp_path,
        tiny_model_dir,
        only="agent_session",
        settings=QUICK.with_changes(server_reuse_tokens=96),
        log=lambda _: None,
        plots=False,
    )
    part = results["parts"]["agent_session"]
    assert part["status"] == "ok", part.get("traceback")
    ours = part["figures"]["swapless"]
    assert ours[0]["reused"] == 0.0
    assert all(step["reused"] >= 0.9 for step in ours[1:6])  # requests 2 to 6
    assert ours[6]["reused"] > 0.5  # the subagent branch: the shared prefix
    assert part["figures"]["mlx_lm_server"] is not None
    assert isinstance(results["targets_met"]["agent_reuse_from_request_2"], bool)
