"""Verdicts from the measured numbers, and the stored form of a result."""

from __future__ import annotations

import math

import pytest

from app.core.quality.cells import Cell, kv_cell
from app.core.quality.metrics import (
    FAILS,
    NOTICEABLE,
    OK,
    CellResult,
    perplexity_ratio,
)


def result(**kwargs) -> CellResult:
    base = dict(
        cell=kv_cell(8, 64),
        positions=100,
        top1_agreement=0.996,
        mean_kl=3e-5,
        perplexity_ratio=1.0,
        recall_hits=10,
        recall_total=10,
        reference_hits=10,
    )
    return CellResult(**{**base, **kwargs})


def test_an_8_bit_like_result_is_ok():
    assert result().verdict == OK


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"top1_agreement": 0.94}, NOTICEABLE),
        ({"top1_agreement": 0.80}, FAILS),
        ({"mean_kl": 0.02}, NOTICEABLE),
        ({"mean_kl": 0.2}, FAILS),
        ({"perplexity_ratio": 1.05}, NOTICEABLE),
        ({"perplexity_ratio": 1.2}, FAILS),
        ({"recall_hits": 8}, NOTICEABLE),
        ({"recall_hits": 5}, FAILS),
    ],
)
def test_the_worst_number_decides(changes, expected):
    assert result(**changes).verdict == expected


def test_one_lost_probe_is_noise():
    assert result(recall_hits=9).verdict == OK
    assert result(recall_hits=2, reference_hits=3, recall_total=3).verdict == OK


def test_missing_numbers_do_not_count_against_a_cell():
    trim = CellResult(cell=Cell("trim", trim="rebuild"), top1_agreement=1.0)
    assert trim.verdict == OK
    assert trim.recall_loss is None


def test_stored_form_round_trips():
    original = result(seconds=1.5, complete=False, kv_bytes_per_token=1088.0)
    data = original.to_dict()
    assert data["cell"] == "kv:8:64"
    assert data["verdict"] == OK
    assert CellResult.from_dict(data) == original


def test_perplexity_ratio_is_the_ratio_of_exponentiated_mean_nll():
    assert perplexity_ratio(10.0, 10.0, 5) == 1.0
    assert math.isclose(perplexity_ratio(10.0, 15.0, 5), math.e)
    assert perplexity_ratio(1.0, 2.0, 0) is None
