"""The quality check on a real (tiny, random-weight) model: events, control, stop."""

from __future__ import annotations

import pytest

from app.core.engine.quality.quality_run import start_quality_check
from app.core.quality.events import (
    CancelToken,
    CellMeasured,
    QualityFinished,
    QualityProgress,
)
from app.core.quality.plan import plan_check
from app.core.quality.probes import ProbeSizes

SMALL = ProbeSizes(
    name="test",
    text_tokens=64,
    pass_key_distances=(48,),
    pass_keys_per_distance=2,
    trim_cases=1,
    dropped_tokens=64,
    kept_tokens=48,
)


def run_check(engine, folder, only, cancel=None, stop_after_cells=None):
    plan = plan_check(folder, only=only, sizes=SMALL)
    token = cancel or CancelToken()
    run = start_quality_check(engine, plan, token)
    events = []
    for event in run:
        events.append(event)
        cells = sum(isinstance(e, CellMeasured) for e in events)
        if stop_after_cells is not None and cells >= stop_after_cells:
            token.cancel()
    return run.report, events


def test_full_precision_against_itself_agrees_everywhere(engine, tiny_model_dir):
    report, events = run_check(engine, tiny_model_dir, ["kv:16:64"])
    (control,) = report.results
    assert control.positions == 4 * 64  # four texts, 64 scored positions each
    assert control.top1_agreement == 1.0
    assert control.mean_kl == 0.0
    assert control.perplexity_ratio == 1.0
    assert control.recall_total == 2
    assert control.recall_hits == control.reference_hits == report.reference_recall[0]
    assert isinstance(events[-1], QualityFinished) and not report.cancelled
    assert report.reference_perplexity > 1


def test_events_stream_in_order_and_count_up_to_the_total(engine, tiny_model_dir):
    report, events = run_check(engine, tiny_model_dir, ["kv:4:32", "trim:rebuild"])
    progress = [e for e in events if isinstance(e, QualityProgress)]
    done = [e.done for e in progress]
    assert done == sorted(done) and done[-1] == progress[-1].total
    kinds = [type(e).__name__ for e in events]
    assert kinds[-1] == "QualityFinished"
    assert kinds.count("CellMeasured") == 2
    measured = [e.result.cell.key for e in events if isinstance(e, CellMeasured)]
    assert measured == ["kv:4:32", "trim:rebuild"]
    four_bit, rebuild = report.results
    assert 0 < four_bit.top1_agreement <= 1 and four_bit.mean_kl > 0
    assert four_bit.kv_bytes_per_token < plan_check(tiny_model_dir).full_bytes_per_token
    # The rebuild is the trims' reference: identical to itself by construction.
    assert rebuild.top1_agreement == 1.0 and rebuild.mean_kl == 0.0


def test_a_stop_keeps_the_cells_already_measured(engine, tiny_model_dir):
    report, events = run_check(
        engine,
        tiny_model_dir,
        ["kv:8:64", "kv:4:64", "trim:splice"],
        stop_after_cells=1,
    )
    assert report.cancelled
    assert report.results[0].cell.key == "kv:8:64" and report.results[0].complete
    assert len(report.results) <= 2
    if len(report.results) == 2:  # stopped inside the second cell: partial, marked
        assert not report.results[1].complete
    assert isinstance(events[-1], QualityFinished)


def test_a_cancel_before_the_start_still_finishes_with_a_report(engine, tiny_model_dir):
    token = CancelToken()
    token.cancel()
    report, events = run_check(engine, tiny_model_dir, ["kv:8:64"], cancel=token)
    assert report.cancelled and report.results == ()
    assert isinstance(events[-1], QualityFinished)


def test_an_unknown_cell_is_refused_with_the_choices(tiny_model_dir):
    with pytest.raises(ValueError, match="unknown cell 'kv:2:64'.*kv:4:128"):
        plan_check(tiny_model_dir, only=["kv:2:64"])
