"""Quality-check results in the store: saved per model identity, read back latest first."""

from __future__ import annotations

from app.core.quality.cells import Cell, kv_cell
from app.core.quality.events import QualityReport
from app.core.quality.metrics import CellResult
from app.core.store import SCHEMA_VERSION, Store


def report(identity="model-a", when="2026-12-03T10:00:00Z", quick=True, **cells):
    results = tuple(
        CellResult(
            cell=Cell.from_key(key),
            positions=100,
            top1_agreement=top1,
            mean_kl=0.01,
            recall_hits=9,
            recall_total=10,
            reference_hits=10,
            complete=complete,
        )
        for key, (top1, complete) in cells.items()
    )
    return QualityReport(
        model_identity=identity,
        model_folder=f"/models/{identity}",
        settings_key="probes-v1:quick" if quick else "probes-v1:full",
        quick=quick,
        results=results,
        seconds=12.5,
        reference_perplexity=18.2,
        reference_recall=(10, 10),
        measured_at=when,
    )


def cells(**kw):
    return {key.replace("_", ":"): value for key, value in kw.items()}


def test_a_saved_report_comes_back_for_its_model_only(store):
    store.save_quality_report(
        report(**cells(kv_4_64=(0.96, True), trim_splice=(0.99, True)))
    )
    latest = store.latest_quality("model-a")
    assert list(latest) == ["kv:4:64", "trim:splice"]
    four = latest["kv:4:64"]
    assert four.result.cell == kv_cell(4, 64)
    assert four.result.top1_agreement == 0.96
    assert four.result.recall_hits == 9 and four.quick
    assert four.measured_at == "2026-12-03T10:00:00Z"
    assert store.latest_quality("model-b") == {}


def test_the_newest_complete_result_of_a_cell_wins(store):
    store.save_quality_report(
        report(when="2026-12-01T10:00:00Z", **cells(kv_8_64=(0.99, True)))
    )
    store.save_quality_report(
        report(when="2026-12-02T10:00:00Z", quick=False, **cells(kv_8_64=(0.98, True)))
    )
    # A later stopped run does not replace a complete measurement.
    store.save_quality_report(
        report(when="2026-12-03T10:00:00Z", **cells(kv_8_64=(0.5, False)))
    )
    latest = store.latest_quality("model-a")["kv:8:64"]
    assert latest.result.top1_agreement == 0.98 and not latest.quick
    checks = store.quality_checks("model-a")
    assert [c["measured_at"][:10] for c in checks] == [
        "2026-12-03",
        "2026-12-02",
        "2026-12-01",
    ]
    assert checks[0]["reference"] == {"perplexity": 18.2, "recall": [10, 10]}


def test_results_persist_across_reopening(db_path, clock):
    with Store.open(db_path, clock=clock) as store:
        store.save_quality_report(report(**cells(kv_4_32=(0.9, True))))
    with Store.open(db_path, clock=clock) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.latest_quality("model-a")["kv:4:32"].result.top1_agreement == 0.9


def test_an_unmeasured_cell_is_stored_with_its_reason(store):
    failed = QualityReport(
        model_identity="m",
        model_folder="/m",
        settings_key="probes-v1:full",
        quick=False,
        results=(
            CellResult(cell=kv_cell(4, 128), error="group 128 does not divide 64"),
        ),
        measured_at="2026-12-03T10:00:00Z",
    )
    store.save_quality_report(failed)
    stored = store.latest_quality("m")["kv:4:128"].result
    assert stored.error == "group 128 does not divide 64"
