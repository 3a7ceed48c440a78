"""The engine's decode loop gives mlx-lm's ``generate_step`` tokens, without its logprobs."""

from __future__ import annotations

import mlx.core as mx
import pytest
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.sample_utils import make_sampler

from app.core.engine.decode_steps import decode_steps
from app.core.engine.engine import Engine
from app.core.presets.generation_settings import KVSettings, SamplingSettings

PROMPT = list(range(5, 45))
TOKENS = 24


@pytest.fixture(scope="module")
def engine(tiny_qwen2_model_dir):
    engine = Engine()
    engine.load(tiny_qwen2_model_dir)
    yield engine
    engine.shutdown()


def _reference(model, prompt, processors=None, sampler=None) -> list[int]:
    """Tokens of plain mlx-lm, as the engine used to decode."""
    cache = make_prompt_cache(model)
    steps = generate_step(
        mx.array(prompt),
        model,
        max_tokens=TOKENS,
        sampler=sampler or make_sampler(temp=0.0),
        prompt_cache=cache,
        logits_processors=processors,
    )
    return [int(token) for token, _ in steps]


def _ours(model, prompt, processors=None, sampler=None) -> list[int]:
    cache = make_prompt_cache(model)
    firsts: list[int] = []
    tokens = list(
        decode_steps(
            model,
            prompt,
            cache,
            sampler or make_sampler(temp=0.0),
            max_tokens=TOKENS,
            logits_processors=processors,
            on_first=lambda: firsts.append(1),
        )
    )
    assert firsts == [1]  # once, when the first token is known
    # Every token handed out is in the cache (the last one without its logits).
    assert cache[0].offset == len(prompt) + TOKENS
    return tokens


def test_greedy_tokens_equal_generate_step(engine):
    model = engine.submit(engine._require_model).result().model
    reference = engine.submit(_reference, model, PROMPT).result()
    ours = engine.submit(_ours, model, PROMPT).result()
    assert len(ours) == TOKENS
    assert ours == reference


def test_seeded_sampling_equals_generate_step(engine):
    model = engine.submit(engine._require_model).result().model

    def sampled(run):
        mx.random.seed(3)
        return run(model, PROMPT, sampler=make_sampler(temp=1.0, top_p=0.9))

    reference = engine.submit(sampled, _reference).result()
    ours = engine.submit(sampled, _ours).result()
    assert ours == reference
    assert len(set(ours)) > 1  # really sampled, not one repeated token


def test_processors_see_the_same_tokens_and_steer_the_same(engine):
    model = engine.submit(engine._require_model).result().model

    def run(decode):
        seen: list[list[int]] = []

        def ban_last(tokens: mx.array, logits: mx.array) -> mx.array:
            seen.append(tokens.tolist())
            # Forbid repeating the latest token: changes what greedy picks.
            banned = mx.arange(logits.shape[-1]) == tokens[-1]
            return mx.where(banned, -mx.inf, logits)

        return decode(model, PROMPT, processors=[ban_last]), seen

    reference, reference_seen = engine.submit(run, _reference).result()
    ours, ours_seen = engine.submit(run, _ours).result()
    assert ours == reference
    # generate_step computes one step past the last token; the histories agree.
    assert ours_seen == reference_seen[: len(ours_seen)]
    assert all(a != b for a, b in zip(ours, ours[1:], strict=False))


def test_engine_reply_equals_plain_mlx_lm(engine):
    kv = KVSettings(bits=16, group_size=64, quantized_kv_start=0)
    sampling = SamplingSettings(temperature=0.0, top_p=1.0, max_tokens=TOKENS, seed=0)
    engine.generate("decode-steps", PROMPT, kv, sampling).wait()
    held = engine.cached_token_ids("decode-steps")
    model = engine.submit(engine._require_model).result().model
    reference = engine.submit(_reference, model, PROMPT).result()
    assert held == PROMPT + reference


def test_bad_arguments():
    with pytest.raises(ValueError, match="inputs must not be empty"):
        next(decode_steps(None, [], [], lambda x: x, max_tokens=3))
    assert list(decode_steps(None, [1], [], lambda x: x, max_tokens=0)) == []
