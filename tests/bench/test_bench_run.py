"""`swapless bench` end to end on the tiny model, with the cheapest measurements."""

from __future__ import annotations

import json

import pytest

from app.bench.parts import prefix_cache
from app.bench.runner import REQUIRED_RATIOS, failure_message, run_bench
from app.bench.settings import QUICK, SMOKE
from app.cli import bench_command

TINY = QUICK.with_changes(
    overhead_pairs=2,
    overhead_prompt_tokens=64,
    overhead_decode_tokens=16,
    kv_token_counts=(256, 300),
    kv_growth_tokens=200,
)


@pytest.fixture(scope="module")
def results(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    results = run_bench(
        out,
        tiny_model_dir,
        only="engine_overhead,kv_bytes",
        settings=TINY,
        log=lambda _: None,
        command="swapless bench --only engine_overhead,kv_bytes",
    )
    return out, results


def test_results_json_has_every_section(results):
    out, _ = results
    data = json.loads((out / "results.json").read_text())
    for key in ("machine", "model", "settings", "parts", "ratios", "targets_met"):
        assert key in data
    machine = data["machine"]
    for key in ("cpu", "logical_cores", "memory_bytes", "os", "mlx", "mlx_lm"):
        assert machine[key]
    assert machine["backend"] in ("cpu", "metal")
    assert isinstance(machine["openblas_preloaded"], bool)
    assert data["model"]["shape"] == "tiny"
    assert data["settings"]["only"] == ["engine_overhead", "kv_bytes"]
    assert set(REQUIRED_RATIOS) <= set(data["ratios"])
    assert data["ratios"]["splice_vs_rebuild"] is None  # not run
    assert data["targets_met"]["splice_vs_rebuild"] is None
    assert (out / "results.md").read_text().startswith("Machine: ")


def test_engine_overhead_is_a_ratio_with_spread(results):
    _, data = results
    part = data["parts"]["engine_overhead"]
    assert part["status"] == "ok" and part["elapsed_s"] > 0
    ratio = data["ratios"]["engine_vs_mlx_lm"]
    assert ratio > 0
    stats = data["ratio_stats"]["engine_vs_mlx_lm"]
    assert stats["n"] == 2 and stats["min"] <= ratio <= stats["max"]
    assert isinstance(data["targets_met"]["engine_vs_mlx_lm"], bool)
    assert part["figures"]["same_greedy_text"]
    split = part["figures"]["decode_step_split_ms"]
    for name in (
        "build_ms",
        "forward_ms",
        "forward_own_blocks_ms",
        "products_ms",
        "attention_ms",
        "argmax_ms",
    ):
        assert split[name] > 0
    # The weight products are part of the forward pass; each share is of one token.
    assert split["products_ms"] < split["forward_ms"] * 1.5
    assert split["engine_token_ms"] > 0 and split["mlx_lm_token_ms"] > 0
    assert 0 < split["shares_of_engine_token"]["forward_ms"] < 2


def test_kv_bytes_match_the_budget_exactly_on_fresh_caches(results):
    _, data = results
    ratios = data["ratios"]["kv_bytes_measured_vs_predicted"]
    assert ratios == {"16": 1.0, "8": 1.0, "4": 1.0}
    assert data["targets_met"]["kv_bytes_measured_vs_predicted"] is True
    cases = data["parts"]["kv_bytes"]["figures"]["cases"]
    assert {c["tokens"] for c in cases} == {256, 300}


def test_a_missing_feature_is_skipped_with_a_note(
    tiny_model_dir, tmp_path, monkeypatch
):
    monkeypatch.setattr(
        prefix_cache, "available", lambda ctx: "not available in this build: test"
    )
    data = run_bench(
        tmp_path,
        tiny_model_dir,
        only=["prefix_cache"],
        settings=TINY,
        log=lambda _: None,
    )
    part = data["parts"]["prefix_cache"]
    assert part["status"] == "skipped"
    assert "not available in this build" in part["note"]
    assert data["ratios"]["prefix_memory_vs_cold"] is None
    assert "Skipped:" in (tmp_path / "results.md").read_text()


def test_a_failing_part_is_named_and_the_others_figures_are_kept(
    tiny_model_dir, tmp_path
):
    # A real bad input: an architecture `make-model` does not know.
    settings = SMOKE.with_changes(arch_names=("no_such_arch",))
    data = run_bench(
        tmp_path,
        tiny_model_dir,
        only="kv_bytes,architectures",
        settings=settings,
        log=lambda _: None,
        plots=False,
    )
    failed = data["parts"]["architectures"]
    assert failed["status"] == "failed"
    assert "unknown architecture 'no_such_arch'" in failed["error"]
    assert "Traceback" in failed["traceback"]
    stored = json.loads((tmp_path / "results.json").read_text())
    assert stored["parts"]["kv_bytes"]["status"] == "ok"
    assert stored["ratios"]["kv_bytes_measured_vs_predicted"] == {
        "16": 1.0,
        "8": 1.0,
        "4": 1.0,
    }
    assert stored["parts"]["architectures"]["status"] == "failed"
    table = (tmp_path / "results.md").read_text()
    assert "KV bytes" in table and "Failed:" in table and "`architectures`" in table
    assert failure_message(data, tmp_path) == (
        f"bench: 1 part failed: architectures (tracebacks in {tmp_path}/results.json)"
    )


def test_the_failure_line_names_every_failed_part_in_run_order(tmp_path):
    parts = {
        "splice": {"status": "failed"},
        "kv_bytes": {"status": "ok"},
        "fidelity": {"status": "skipped"},
        "ui": {"status": "failed"},
    }
    message = failure_message({"parts": parts}, tmp_path)
    assert message is not None
    assert message.startswith("bench: 2 parts failed: splice, ui (")
    assert failure_message({"parts": {"kv_bytes": {"status": "ok"}}}, tmp_path) is None


def test_the_command_line_exits_0_and_names_no_part_when_all_ran(
    tiny_model_dir, tmp_path, capfd
):
    from app.cli.main import main

    out = tmp_path / "out"
    code = main(
        ["bench", "--model", str(tiny_model_dir), "--only", "kv_bytes"]
        + ["--out", str(out)]
    )
    captured = capfd.readouterr()  # file descriptors: the part watchdog needs one
    assert code == 0, captured.err
    assert "KV bytes" in captured.out
    assert "parts failed" not in captured.err and "part failed" not in captured.err
    assert (out / "results.json").is_file()


def test_the_command_line_parses_and_rejects_unknown_names():
    import argparse

    parser = argparse.ArgumentParser()
    bench_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--quick", "--only", "kv_bytes", "--out", "x"])
    assert (args.quick, args.only, args.out, args.model) == (
        True,
        "kv_bytes",
        "x",
        None,
    )
    assert bench_command._command_args(args) == [
        "bench",
        "--quick",
        "--out",
        "x",
        "--only",
        "kv_bytes",
    ]
    with pytest.raises(ValueError, match="unknown measurement"):
        bench_command.run(parser.parse_args(["bench", "--only", "nope"]))
