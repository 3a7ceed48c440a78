"""The committed reference model: it recalls, it models text, and compression shows.

These are the figures the quality check relies on: a model that finds pass keys at
512 tokens' distance (target ≥ 90 %) and predicts held-out text far better than a
unigram model, so that 8- and 4-bit KV have something measurable to damage.
"""

from __future__ import annotations

import json

import pytest

from app.core.engine.quality.quality_run import start_quality_check
from app.core.modelkit.reference import evaluation
from app.core.modelkit.reference.install import MODEL_FILES, committed_folder
from app.core.quality.plan import plan_check
from app.core.quality.probes import ProbeSizes

SIZES = ProbeSizes(
    name="test",
    text_tokens=384,
    pass_key_distances=(512,),
    pass_keys_per_distance=4,
    trim_cases=0,
    dropped_tokens=0,
    kept_tokens=0,
)


def test_the_committed_folder_is_a_small_float16_llama():
    folder = committed_folder()
    sizes = {name: (folder / name).stat().st_size for name in MODEL_FILES}
    assert sizes["model.safetensors"] < 8 * 2**20
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["torch_dtype"] == "float16"
    builder = config["swapless_builder"]
    assert builder["shape"] == "reference" and builder["random_weights"] is False


def test_an_installed_copy_is_private_from_the_start(tmp_path):
    import os
    import stat

    from app.core.modelkit.reference.install import install_reference_model

    old = os.umask(0o022)  # the usual umask: plain copies would be readable by all
    try:
        folder = install_reference_model(tmp_path / "models" / "reference")
    finally:
        os.umask(old)
    for name in MODEL_FILES:
        mode = stat.S_IMODE((folder / name).stat().st_mode)
        assert mode & 0o077 == 0, (name, oct(mode))


def _evaluate(engine, sizes):
    def job():
        return evaluation.evaluate(engine._require_model(), sizes)

    return engine.submit(job).result()


def test_recall_at_512_tokens_meets_its_target(reference_engine):
    # The 30 probes docs/reference-model.md quotes (their seed depends on the distance
    # only), so the documented figure and this test are the same measurement.
    figures = _evaluate(
        reference_engine,
        evaluation.EvaluationSizes(
            text_windows=0, pass_keys=30, distances=(512,), other_tasks=0
        ),
    )
    assert figures.pass_key[512] >= 0.9


def test_held_out_perplexity_is_far_below_a_unigram_models(reference_engine):
    figures = _evaluate(
        reference_engine,
        evaluation.EvaluationSizes(
            text_windows=4, pass_keys=0, distances=(), other_tasks=0
        ),
    )
    assert figures.held_out_tokens == 4 * 512
    assert figures.perplexity < figures.unigram_perplexity / 4


def test_the_check_is_exact_at_16_bits_and_costs_more_at_4_than_8(
    reference_engine, reference_model_dir
):
    plan = plan_check(
        reference_model_dir, only=["kv:16:64", "kv:8:64", "kv:4:64"], sizes=SIZES
    )
    report = start_quality_check(reference_engine, plan).wait()
    control, eight, four = report.results
    assert control.top1_agreement == 1.0 and control.mean_kl == 0.0
    assert control.perplexity_ratio == 1.0
    assert control.recall_hits == control.reference_hits
    assert 0 < eight.mean_kl < four.mean_kl
    assert 1.0 >= eight.top1_agreement >= four.top1_agreement
    assert four.top1_agreement < 1.0
    # 4-bit moves perplexity further than 8-bit; on 1,536 positions the direction is
    # noise (the retrained model's 4-bit run came out 0.1 % *lower*), so compare sizes.
    assert abs(eight.perplexity_ratio - 1) <= abs(four.perplexity_ratio - 1)
    assert report.reference_recall[0] >= 3  # of 4 pass keys at 512 tokens


@pytest.mark.slow
def test_full_held_out_figures(reference_engine):
    """The figures docs/reference-model.md quotes (several minutes)."""
    figures = _evaluate(reference_engine, evaluation.EvaluationSizes())
    assert figures.pass_key[512] >= 0.9
    assert figures.perplexity < figures.unigram_perplexity / 4


def test_the_shipped_model_copies_a_held_out_quoted_value_into_its_call(
    reference_model_dir,
):
    """#25: calls on values training never used (the single-tool probes, raw output).

    Measured on the committed weights: 17 of 20 right with thinking on, 7 of 10 off;
    the weights before the value-copy phase made 2 and 0 (docs/reference-model.md).
    Values in plain words stay at 0 of 10 (the value head keys on the quote).
    """
    from app.core.engine.loader import load_model_folder
    from app.core.modelkit.reference import tool_probes

    result = tool_probes.run_tool_probes(load_model_folder(reference_model_dir))
    assert result.calls["quoted_thinking"] >= 14, result.summary()
    assert result.calls["quoted_no_thinking"] >= 6, result.summary()
    assert result.answers["quoted_thinking"] >= 14, result.summary()
