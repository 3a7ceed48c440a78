"""check-quality measures the presets whose KV precision ages (issue 20), on the model."""

from __future__ import annotations

import pytest

from app.core.engine.quality.quality_run import start_quality_check
from app.core.presets.generation_settings import KVAging
from app.core.presets.presets import all_presets, get_preset, save_user_preset
from app.core.quality.cells import KV, Cell, aged_cell, grid
from app.core.quality.plan import plan_check
from app.core.quality.preset_quality import StoredResult, preset_quality
from app.core.quality.probes import ProbeSizes
from app.core.quality.report_text import short_line, table

# Texts long enough (256 tokens) that a 64-token window over a 64-token block leaves
# most of every text's scored positions reading old tokens at the floor.
SIZES = ProbeSizes(
    name="test-aged",
    text_tokens=256,
    pass_key_distances=(48,),
    pass_keys_per_distance=2,
    trim_cases=1,
    dropped_tokens=64,
    kept_tokens=48,
)
SMALL_WINDOW = KVAging(
    recent_tokens=64, floor_key_bits=4, floor_value_bits=4, block_tokens=64
)
WIDE_WINDOW = KVAging(recent_tokens=1024, floor_key_bits=4, floor_value_bits=4)


def _save(name: str, aging: KVAging):
    preset = get_preset("chat").with_changes(
        name=name,
        kv_bits=aging.floor_key_bits,
        kv_recent_tokens=aging.recent_tokens,
        kv_floor_value_bits=aging.floor_value_bits,
        kv_age_block=aging.block_tokens,
    )
    save_user_preset(preset)
    return preset


def test_an_aged_cell_key_round_trips_and_says_its_tiers():
    cell = aged_cell(SMALL_WINDOW, 64)
    assert cell.key == "kv:4:64:r64+k4v4/64"
    assert Cell.from_key(cell.key) == cell
    assert cell.label == "aged KV (64 exact, then 4-bit), group 64"
    assert cell.kv_settings.aging == SMALL_WINDOW
    with pytest.raises(ValueError):
        Cell(KV, 8, 64, aging=SMALL_WINDOW.spec)  # the floor is 4-bit, not 8


def test_the_grid_adds_aged_cells_after_the_uniform_ones():
    cells = grid([(4, 64)], trims=False, preset_agings=[(SMALL_WINDOW, 64)])
    assert [c.key for c in cells][-1] == "kv:4:64:r64+k4v4/64"
    assert sum(bool(c.aging) for c in cells) == 1


def test_built_in_presets_age_nothing_so_the_plan_has_no_aged_cell(tiny_model_dir):
    assert all(p.kv_settings().aging is None for p in all_presets().values())
    assert not any(cell.aging for cell in plan_check(tiny_model_dir).cells)


def test_check_quality_measures_a_user_presets_aging_on_the_model(
    engine, tiny_model_dir
):
    small = _save("aged-small", SMALL_WINDOW)
    wide = _save("aged-wide", WIDE_WINDOW)
    plan = plan_check(tiny_model_dir, sizes=SIZES)
    aged_keys = [cell.key for cell in plan.cells if cell.aging]
    small_key, wide_key = (aged_cell(a, 64).key for a in (SMALL_WINDOW, WIDE_WINDOW))
    assert sorted(aged_keys) == sorted([small_key, wide_key])
    # An aged cache's average bytes per token sit between 4-bit's and full precision's.
    four = plan.bytes_per_token["kv:4:64"]
    assert four < plan.bytes_per_token[small_key] < plan.full_bytes_per_token

    only = [small_key, wide_key, "kv:4:64"]
    report = start_quality_check(
        engine, plan_check(tiny_model_dir, only=only, sizes=SIZES)
    ).wait()
    results = {r.cell.key: r for r in report.results}
    assert set(results) == set(only) and all(r.complete for r in results.values())
    # Every token of these texts is in the wide window: exact, nothing to lose.
    assert results[wide_key].mean_kl == 0.0
    assert results[wide_key].top1_agreement == 1.0
    # The small window reads most of the text at 4 bits: a measurable cost, at most
    # uniform 4-bit's order of magnitude.
    assert results[small_key].mean_kl > 0.0
    assert results[small_key].mean_kl < 10 * results["kv:4:64"].mean_kl

    text = table(report)
    assert "aged KV (64 exact, then 4-bit), group 64" in text
    assert "its cost shows only on longer" in " ".join(text.split())

    stored = {
        key: StoredResult(result, "2026-12-01T00:00:00Z", SIZES.name)
        for key, result in results.items()
    }
    rows = {
        row.preset: row
        for row in preset_quality({"aged-small": small, "aged-wide": wide}, stored)
    }
    assert rows["aged-small"].kv.result.cell.key == small_key
    assert rows["aged-wide"].kv.result.cell.key == wide_key
    assert "aged KV (64 exact, then 4-bit)" in rows["aged-small"].lines()[0]
    # The phrase beside a preset names the tiers, not just the floor's bits.
    assert short_line(results[small_key]).startswith("aged KV (64 exact, then 4-bit)")
