"""Every benchmark part, end to end at the smoke sizes, in one run on the tiny model.

`SMOKE` is the smallest set of sizes that still walks each part's code: a few tokens,
one pair, a few cells, two architectures (recurrent hybrid, full attention), a
one-second stream in the offscreen window. The figures mean nothing at these sizes;
what is checked is that every part finishes ``ok`` and that every ratio and figure it
reports is a finite number, so a part broken by a change elsewhere fails here, not
months later in a benchmark run nobody reads. A part that cannot run on this machine
is skipped with its reason, which ``-rs`` prints.
"""

from __future__ import annotations

import json
import math

import pytest

from app.bench.registry import MEASUREMENTS
from app.bench.runner import REQUIRED_RATIOS
from app.bench.settings import SMOKE, TARGETS


@pytest.fixture
def smoke(smoke_run):
    """The shared run (tests/bench/conftest.py)."""
    return smoke_run


def _numbers(value, where: str, verdicts: bool = False):
    """Every number in a JSON-ready value, with where it is; bools are not numbers
    (with ``verdicts`` they are yielded too, as a part's pass/fail verdicts)."""
    if isinstance(value, bool):
        if verdicts:
            yield where, float(value)
        return
    if value is None or isinstance(value, str):
        return
    if isinstance(value, int | float):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{where}.{key}", verdicts)
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _numbers(item, f"{where}[{index}]", verdicts)


def _part(smoke, name: str) -> dict:
    _, results, _ = smoke
    part = results["parts"][name]
    if part["status"] == "skipped":
        pytest.skip(f"bench part {name!r} skipped: {part['note']}")
    assert part["status"] == "ok", part.get("traceback")
    return part


@pytest.mark.parametrize("name", MEASUREMENTS)
def test_every_part_runs_and_reports_finite_numbers(smoke, name):
    part = _part(smoke, name)
    assert part["rows"], f"{name} wrote no table row"
    for where, number in _numbers(part["ratios"], "ratios"):
        assert math.isfinite(number), f"{name} {where} = {number}"
    for where, number in _numbers(part["figures"], "figures"):
        assert math.isfinite(number), f"{name} {where} = {number}"
    # Every ratio it owns is a number (or a dict of numbers, or of verdicts): none is
    # left empty or None.
    for key, value in part["ratios"].items():
        numbers = list(_numbers(value, key, verdicts=True))
        assert numbers, f"{name} ratio {key} holds no number: {value!r}"


def test_every_required_ratio_and_target_is_measured(smoke):
    _, results, _ = smoke
    ratios, met = results["ratios"], results["targets_met"]
    skipped = sorted(n for n, p in results["parts"].items() if p["status"] == "skipped")
    if skipped:
        pytest.skip(f"parts skipped on this machine: {', '.join(skipped)}")
    for key in (*REQUIRED_RATIOS, *TARGETS):
        assert ratios[key] is not None, f"{key} was not measured"
        assert all(math.isfinite(n) for _, n in _numbers(ratios[key], key)), key
    assert all(isinstance(met[key], bool) for key in TARGETS)


def test_splice_and_ui_lateness_are_measured(smoke):
    splice = _part(smoke, "splice")
    assert splice["figures"]["token_ids_match"] is True
    assert splice["ratios"]["splice_vs_rebuild"] > 0
    ui = _part(smoke, "ui")["figures"]
    for measure in ("lateness", "markdown_streaming"):
        found = ui[measure]
        assert found["samples"] > 0
        assert 0 <= found["p50_ms"] <= found["p99_ms"] <= found["max_ms"]
    assert ui["lateness"]["tokens"] > 0
    assert ui["markdown_streaming"]["reply_chars"] >= SMOKE.ui_markdown_chars
    assert ui["cold_start_s"] > 0


def test_the_paths_that_matter_were_taken(smoke):
    # Sizes small enough to skip the interesting branch would pass the checks above.
    reuse = _part(smoke, "turn_reuse")["figures"]["contexts"]
    assert all(min(c["reused_tokens"]) > 0 for c in reuse.values())
    conversation = _part(smoke, "long_conversation")["figures"]["summary"]
    assert conversation["on"]["trims"] >= 1 and conversation["off"]["trims"] == 0
    fidelity = _part(smoke, "fidelity")["figures"]["cells"]
    assert all(not cell["error"] for cell in fidelity)
    aged = _part(smoke, "aged_kv")["figures"]
    assert list(aged["contexts"]) == [str(t) for t in SMOKE.aged_contexts]


def test_results_files_hold_every_part(smoke):
    out, results, lines = smoke
    stored = json.loads((out / "results.json").read_text())
    assert list(stored["parts"]) == list(MEASUREMENTS)
    assert stored["settings"]["fidelity_probes"] == "smoke"
    table = (out / "results.md").read_text()
    assert "splice ÷ rebuild" in table and "UI timer lateness" in table
    assert set(stored["part_elapsed_s"]) == set(MEASUREMENTS)
    assert any(line.startswith("[1/") for line in lines)
    for name in results["files"]:
        assert (out / name).is_file()


def test_reasoning_is_cut_from_the_cache_and_compared(smoke):
    figures = _part(smoke, "reasoning")["figures"]
    modes = figures["modes"]
    assert list(modes) == ["cut", "reprefill", "kept"]
    assert all(len(turns) == SMOKE.reasoning_turns for turns in modes.values())
    cut, before = modes["cut"], modes["reprefill"]
    # The reference model thinks (its first reply up to the smoke budget); every
    # reply's reasoning block, empty or not, is spliced out of the cache.
    assert cut[0]["reasoning_tokens"] > 2
    assert all(t["cut_method"] == "splice" and t["cut_tokens"] > 0 for t in cut)
    assert all(t["cut_method"] == "" for t in before)
    # From turn 2 on the cut cache serves the whole history; before the cut the
    # previous answer is prefilled again.
    assert cut[1]["reused_tokens"] >= before[1]["reused_tokens"]
    assert cut[1]["prefill_tokens"] < before[1]["prefill_tokens"]
    assert figures["summary"]["cut"]["kv_tokens_last"] < before[-1]["kv_tokens"]
