"""The grid of compressions a quality check measures."""

from __future__ import annotations

import pytest

from app.core.quality.cells import CONTROL, KV, TRIM, Cell, grid, kv_cell


def test_keys_round_trip_and_read_well():
    for cell in grid([(4, 32)]):
        assert Cell.from_key(cell.key) == cell
    assert kv_cell(4, 64).key == "kv:4:64"
    assert kv_cell(4, 64).label == "4-bit KV, group 64"
    assert Cell(TRIM, trim="splice").key == "trim:splice"
    assert CONTROL.label == "16-bit KV (full precision)"


def test_grid_holds_8_and_4_bits_at_every_group_then_the_trims():
    keys = [cell.key for cell in grid()]
    assert keys == [
        "kv:8:32",
        "kv:8:64",
        "kv:8:128",
        "kv:4:32",
        "kv:4:64",
        "kv:4:128",
        "trim:splice",
        "trim:rebuild",
        "trim:none",
    ]


def test_groups_that_do_not_divide_the_head_are_left_out():
    keys = [cell.key for cell in grid(head_dim=64, trims=False)]
    assert "kv:8:128" not in keys and "kv:4:128" not in keys
    assert "kv:4:64" in keys


def test_presets_add_their_precision_and_16_bit_adds_nothing():
    # A (hypothetical) 6-bit preset would add a cell; 16-bit presets never do.
    cells = grid([(16, 64), (8, 64)], trims=False)
    assert len(cells) == 6
    assert all(cell.kind == KV and cell.bits in (8, 4) for cell in cells)


@pytest.mark.parametrize("key", ["kv:8", "kv:x:64", "trim:cut", "other:1", ""])
def test_bad_keys_are_refused(key):
    with pytest.raises(ValueError):
        Cell.from_key(key)
