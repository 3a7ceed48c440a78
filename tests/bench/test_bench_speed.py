"""The limits and the speed-vs-context part, end to end on the tiny model."""

from __future__ import annotations

import pytest

from app.bench.parts.context_speed import prefill_flops
from app.bench.runner import run_bench
from app.bench.settings import QUICK

SMALL = QUICK.with_changes(
    speed_contexts=(64, 160),
    speed_reps=1,
    speed_decode_tokens=4,
    speed_warm_tokens=16,
    limits_read_bytes=16 * 2**20,
    limits_gemm_size=128,
    limits_row_matrix=(4096, 128),
    limits_repetitions=1,
)


def test_prefill_flops_count_matmuls_and_the_keys_each_token_sees():
    costs = {"matmul_parameters": 1000, "layers": 2, "heads": 3, "head_dim": 4}
    # Tokens 0 and 1 see 1 and 2 keys: attention 4 * 2 * 3 * 4 * 3 = 288.
    assert prefill_flops(costs, 0, 2) == 2 * 1000 * 2 + 288
    # Token 2 alone sees 3 keys.
    assert prefill_flops(costs, 2, 3) == 2 * 1000 + 4 * 2 * 3 * 4 * 3


@pytest.fixture(scope="module")
def speed(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-speed")
    return run_bench(
        out,
        tiny_model_dir,
        only="limits,context_speed",
        settings=SMALL,
        log=lambda _: None,
        plots=False,
    )


def test_limits_are_measured_and_positive(speed):
    part = speed["parts"]["limits"]
    assert part["status"] == "ok"
    figures = part["figures"]
    assert figures["read_bytes_per_s"] > 1e8
    assert figures["gemm_flops_per_s"] > 1e8
    assert figures["row_gemm_bytes_per_s"] > 1e7
    assert speed["machine"]["blas"] in ("BLIS", "OpenBLAS", None)


def test_every_speed_has_its_fraction_and_the_quantized_ratios(speed):
    part = speed["parts"]["context_speed"]
    assert part["status"] == "ok", part.get("traceback")
    figures = part["figures"]
    assert figures["model_costs"]["head_dim"] == 128
    limits = speed["parts"]["limits"]["figures"]
    for bits in ("16", "8", "4"):
        for context in ("64", "160"):
            cell = figures["by_bits"][bits][context]
            moved = cell["decode_bytes_per_token"]
            assert moved > figures["model_costs"]["matmul_weight_bytes"]
            assert cell["decode_fraction_of_bandwidth"] == pytest.approx(
                moved * cell["decode_tps"]["median"] / limits["read_bytes_per_s"]
            )
            assert cell["prefill_fraction_of_gemm_peak"] > 0
    ratios = speed["ratios"]["quantized_vs_16bit_speed"]
    assert set(ratios) == {"64", "160"}
    for context in ratios.values():
        assert set(context) == {"8", "4"}
        for cell in context.values():
            assert set(cell) == {"prefill", "warm_turn", "decode"}
            assert all(value > 0 for value in cell.values())
    rows = [row["measurement"] for row in part["rows"]]
    assert any("fraction of read bandwidth" in row for row in rows)
    assert any("fraction of GEMM peak" in row for row in rows)
