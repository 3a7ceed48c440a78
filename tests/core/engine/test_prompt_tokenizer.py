"""Tokenizing runs on the caller's thread, memoised, and never waits for generation."""

from __future__ import annotations

import threading

from app.core.cancel import CancelToken
from app.core.engine.events import GenerationEvent
from app.core.presets.generation_settings import KVSettings, SamplingSettings

MESSAGES = [
    {"role": "system", "content": "You are brief."},
    {"role": "user", "content": "Name three rivers of Europe."},
]


def test_render_equals_the_chat_template_and_is_memoised(engine):
    tokenizer = engine.tokenizer
    wrapped = engine._require_model().tokenizer
    text = wrapped.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    expected = list(wrapped.encode(text, add_special_tokens=False))
    hits = tokenizer.hits
    assert tokenizer.render(MESSAGES) == expected
    first = tokenizer.render(MESSAGES)
    first.append(-1)  # callers get their own list
    assert tokenizer.render(MESSAGES) == expected
    assert tokenizer.hits >= hits + 2
    assert tokenizer.count("Name three rivers") == len(
        wrapped.encode("Name three rivers", add_special_tokens=False)
    )


def test_many_threads_render_the_same_ids(engine):
    expected = engine.render(MESSAGES)
    results: list[list[int]] = []

    def work(i: int) -> None:
        messages = [*MESSAGES, {"role": "assistant", "content": f"Reply {i}"}]
        ids = engine.render(messages, False)
        results.append(ids[: len(expected) - 3])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r == results[0] for r in results)


def test_rendering_and_cache_state_answer_while_the_engine_generates(engine):
    # If either waited for the engine thread, it would return only after the whole
    # reply, and the cancel below would come too late to cut it short.
    token = CancelToken()
    sampling = SamplingSettings(temperature=0.0, max_tokens=3000)
    handle = engine.chat("busy", MESSAGES, KVSettings(), sampling, cancel=token)
    events = iter(handle)
    assert isinstance(
        next(e for e in events if isinstance(e, GenerationEvent)), GenerationEvent
    )
    engine.render([{"role": "user", "content": "A new question while busy?"}])
    engine.count_tokens("another text while busy")
    engine.cache_state("some-other-conversation")
    token.cancel()
    for _ in events:
        pass
    assert handle.final.finish_reason == "cancelled"
    assert handle.final.generated_tokens < 3000
    assert engine.cache_state("busy").tokens == (
        handle.final.prompt_tokens + handle.final.generated_tokens
    )
