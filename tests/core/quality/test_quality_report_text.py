"""The words and tables quality results are shown in."""

from __future__ import annotations

from app.core.quality.cells import Cell, kv_cell
from app.core.quality.events import QualityReport
from app.core.quality.metrics import CellResult
from app.core.quality.report_text import measured_day, one_line, preset_warning, table


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
