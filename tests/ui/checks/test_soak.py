"""The soak harness: it passes on a sound window and fails, in words, when a check fails.

`make soak` runs it for three minutes (and CI after `make test`); here it runs briefly.
"""

from __future__ import annotations

import pytest

from app.ui.checks.soak import run_soak


def test_the_soak_fails_in_words_when_the_model_cannot_load(qapp, tmp_path, capsys):
    assert run_soak(seconds=5, model_dir=str(tmp_path / "no-model")) == 1
    err = capsys.readouterr().err
    assert err.startswith("soak FAILED: ") and "no-model" in err


@pytest.mark.slow
def test_a_short_soak_passes(qapp, tiny_model_dir, capsys):
    assert run_soak(seconds=30, model_dir=str(tiny_model_dir)) == 0
    out = capsys.readouterr().out
    assert "trimmed after" in out and "soak: passed: " in out and "0 Qt warnings" in out
