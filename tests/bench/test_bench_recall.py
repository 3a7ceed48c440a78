"""The benchmark's recall part: trimmed facts on the reference model, Wilson intervals."""

from __future__ import annotations

import random

from app.bench.parts.recall import recall


def test_recall_part_runs_every_cell_and_times_the_recall_step(smoke_run):
    # The shared smoke run (tests/bench/conftest.py): one conversation per cell.
    out, results, _ = smoke_run
    part = results["parts"]["recall"]
    assert part["status"] == "ok", part.get("traceback")
    cells = part["figures"]["cells"]
    assert set(cells) == {f"{m}:{k}" for m in recall.MODES for k in recall.KINDS}
    for outcome in cells.values():
        assert outcome["total"] == 1
        assert outcome["fact_trimmed"] == 1  # the fact lives only in trimmed turns
        low, high = outcome["wilson_95"]
        assert 0 <= low <= outcome["share"] <= high <= 1
    # With recall on, the dormant fact's original comes back before the question.
    assert cells["recall:dormant"]["recalled_fact"] == 1
    assert cells["summary:dormant"]["recalled_fact"] == 0
    assert part["figures"]["overhead"]["median_ms"] > 0
    assert "trimmed_fact_recall.png" in results["files"]
    assert (out / "trimmed_fact_recall.png").is_file()


def test_cases_are_seeded_and_an_updated_fact_changes_its_value():
    filler = lambda tokens, rng: " ".join("word" for _ in range(tokens))  # noqa: E731
    a = recall.make_case("updated", random.Random("x"), filler)
    b = recall.make_case("updated", random.Random("x"), filler)
    assert a == b
    assert a.old_answer and a.old_answer != a.answer
    assert any(a.answer in text for _, text in a.history)


def test_wilson_interval():
    low, high = recall.wilson(160, 200)
    assert 0.739 < low < 0.740 and 0.849 < high < 0.850
    assert recall.wilson(0, 10)[0] == 0.0


def test_a_run_of_one_cell_reports_only_that_cell(monkeypatch):
    monkeypatch.setattr(recall, "KINDS", ("updated",))
    monkeypatch.setattr(recall, "MODES", ("recall",))
    cells = {"recall:updated": {"hits": 188, "total": 200, "fact_trimmed": 200}}
    overhead = {"messages": 5000, "median_ms": 62.4, "max_ms": 90.0, "reps": 30}
    result = recall._result(cells, overhead, 200)
    assert result.ratios["recall_trimmed_fact_share"] == 0.94
    assert "summary_trimmed_fact_share" not in result.ratios
    assert "first_sentence_trimmed_fact_share" not in result.ratios
    assert result.targets_met["recall_trimmed_fact_share"] is True
    assert [row.result for row in result.rows][0] == "188/200 (94%)"


def test_a_run_cut_short_reports_the_cells_it_finished():
    # Cells are saved as they finish; a run stopped before the first-sentence cells
    # still reports today's and recall's.
    cells = {
        "summary:dormant": {"hits": 199, "total": 200, "fact_trimmed": 200},
        "recall:dormant": {"hits": 200, "total": 200, "fact_trimmed": 200},
    }
    overhead = {"messages": 5000, "median_ms": 6.0, "max_ms": 9.0, "reps": 30}
    result = recall._result(cells, overhead, 200)
    rows = [row.measurement for row in result.rows]
    assert rows[:2] == [
        f"Trimmed fact, dormant: {recall.MODE_LABELS['summary']}",
        f"Trimmed fact, dormant: {recall.MODE_LABELS['recall']}",
    ]
    assert "first_sentence_trimmed_fact_share" not in result.ratios
    assert result.ratios["recall_trimmed_fact_share"] == 1.0
