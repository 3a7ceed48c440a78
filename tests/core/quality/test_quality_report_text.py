"""The words and tables quality results are shown in."""

from __future__ import annotations

from app.core.quality.cells import Cell, kv_cell
from app.core.quality.events import QualityReport
from app.core.quality.metrics import CellResult
from app.core.quality.report_text import (
    measured_day,
    one_line,
    preset_warning,
    short_line,
    table,
)


def four_bit(**changes) -> CellResult:
    values = dict(
        cell=kv_cell(4, 64),
        positions=1000,
        top1_agreement=0.96,
        mean_kl=0.0094,
        perplexity_ratio=1.008,
        recall_hits=9,
        recall_total=10,
        reference_hits=10,
        kv_bytes_per_token=1536.0,
    )
    return CellResult(**{**values, **changes})


def test_one_line_reads_like_the_issue_asks():
    line = one_line(four_bit(), "2026-12-03T10:00:00Z")
    assert line == (
        "4-bit KV, group 64: 96.0 % top-1, KL 9.40e-03, recall 9/10, measured 3 Dec"
    )


def test_the_phrase_beside_a_preset_is_short_and_never_rounds_up_to_100():
    assert short_line(four_bit(), "2026-12-03T10:00:00Z") == (
        "4-bit KV on this model: 96 % top-1, recall 9/10, measured 3 Dec"
    )
    eight = four_bit(cell=kv_cell(8, 32), top1_agreement=0.996, recall_total=0)
    assert short_line(eight) == "8-bit KV (group 32) on this model: 99.6 % top-1"
    splice = four_bit(cell=Cell("trim", trim="splice"), top1_agreement=1.0)
    assert short_line(splice).startswith("Splice trim on this model: 100 % top-1")
    assert short_line(four_bit(complete=False)).endswith("(stopped early)")


def test_unmeasured_and_stopped_cells_say_so():
    error = CellResult(cell=kv_cell(4, 128), error="group 128 does not divide 64")
    assert "not measured (group 128 does not divide 64)" in one_line(error)
    assert one_line(four_bit(complete=False)).endswith("(stopped early)")


def test_table_has_a_row_per_cell_and_the_legend():
    report = QualityReport(
        model_identity="abc",
        model_folder="/m",
        settings_key="probes-v1:quick",
        quick=True,
        results=(four_bit(), CellResult(cell=Cell("trim", trim="rebuild"))),
        cancelled=True,
        seconds=12.0,
        reference_perplexity=18.25,
        reference_recall=(10, 10),
    )
    text = table(report)
    assert "perplexity 18.25," in text and "pass keys 10/10." in text
    assert "4-bit KV, group 64" in text and "96.0 %" in text and "1.008" in text
    assert "9/10 (10)" in text
    assert "Stopped before the end" in text
    assert "top-1: how often" in text


def test_only_a_failing_kv_precision_warns_a_preset():
    assert preset_warning("chat", four_bit()) is None
    failing = four_bit(top1_agreement=0.7, recall_hits=3)
    warning = preset_warning("long-document", failing)
    assert warning.startswith("Preset 'long-document' uses 4-bit KV, group 64")
    assert measured_day("not a date") == "not a date"


def test_each_preset_gets_its_own_precisions_phrase_or_not_measured():
    from app.core.presets.presets import all_presets
    from app.core.quality.preset_quality import (
        NOT_MEASURED,
        StoredResult,
        preset_quality,
    )

    failing = four_bit(top1_agreement=0.62)
    stored = {"kv:4:64": StoredResult(failing, "2026-12-03T10:00:00Z", "p:full")}
    rows = {row.preset: row for row in preset_quality(all_presets(), stored)}
    assert rows["long-document"].summary.startswith("4-bit KV on this model: 62 %")
    assert rows["long-document"].fails and rows["long-document"].warning
    assert rows["chat"].summary == NOT_MEASURED and not rows["chat"].measured
    assert rows["chat"].warning is None
