"""The benchmark's pure parts: summaries, interleaved ratios, targets, measurement names."""

from __future__ import annotations

import pytest

from app.bench import registry
from app.bench.settings import QUICK, TARGETS, Target
from app.bench.stats import pair_ratios, quantile, summarize


def test_summary_has_median_spread_and_samples():
    summary = summarize([3.0, 1.0, 2.0, 10.0])
    assert summary["median"] == 2.5
    assert (summary["min"], summary["max"], summary["n"]) == (1.0, 10.0, 4)
    assert summary["q1"] == pytest.approx(1.75)
    assert summary["q3"] == pytest.approx(4.75)
    assert summary["samples"] == [3.0, 1.0, 2.0, 10.0]


def test_quantile_and_summary_refuse_nothing():
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_pair_ratios_pair_each_a_with_its_b():
    assert pair_ratios([2.0, 3.0], [4.0, 3.0]) == [0.5, 1.0]
    with pytest.raises(ValueError):
        pair_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        pair_ratios([1.0], [0.0])


def test_targets_hold_at_their_edges():
    assert TARGETS["engine_vs_mlx_lm"].holds(0.95)
    assert not TARGETS["engine_vs_mlx_lm"].holds(0.9499)
    within = TARGETS["kv_bytes_measured_vs_predicted"]
    assert within.holds(1.02) and within.holds(0.98)
    assert not within.holds(1.0201)
    assert TARGETS["splice_vs_rebuild"].text() == "≤ 0.15"
    with pytest.raises(ValueError):
        Target("around", 1.0).holds(1.0)


def test_only_accepts_known_names_in_run_order():
    assert registry.select("kv_bytes, engine_overhead") == [
        "engine_overhead",
        "kv_bytes",
    ]
    assert registry.select(None) == list(registry.MEASUREMENTS)
    with pytest.raises(ValueError, match="unknown measurement 'nope'"):
        registry.select("nope,kv_bytes")


def test_every_measurement_module_has_the_interface():
    for name in registry.MEASUREMENTS:
        module = registry.module(name)
        assert name == module.NAME
        assert module.TITLE and callable(module.available) and callable(module.run)


def test_settings_reject_unknown_sizes():
    assert QUICK.with_changes(overhead_pairs=1).overhead_pairs == 1
    with pytest.raises(ValueError, match="unknown bench setting"):
        QUICK.with_changes(overhead_pair=1)


def test_enough_samples_get_a_confidence_interval_of_the_median():
    summary = summarize([0.9, 1.0, 1.1, 0.95, 1.05, 0.97, 1.2, 0.8])
    low, high = summary["median_ci95"]
    assert low <= summary["median"] <= high
    assert summarize([0.9, 1.0, 1.1, 0.95, 1.05, 0.97, 1.2, 0.8]) == summary
    assert "median_ci95" not in summarize([1.0, 2.0])
