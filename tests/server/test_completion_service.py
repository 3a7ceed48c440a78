"""One request at a time on the real tiny model, without HTTP: reuse, trims, refusals."""

from __future__ import annotations

import threading

import pytest

from app.core.cancel import CancelToken
from app.server.errors import ContextLengthExceeded, RequestError, ServiceUnavailable
from app.server.events import Accepted, Finished, TextDelta, TrimApplied
from app.server.openai_chat.openai_request import ChatMessage, ChatRequest
from app.server.service.completion import CompletionService

SYSTEM = "You are Swapless test bot. Always answer briefly."


def user_turn(i: int) -> str:
    return f"Turn {i}: please remember that item {i} costs {i * 3} euros and is blue."


def request(model_id, messages, **fields) -> ChatRequest:
    return ChatRequest(
        model=model_id,
        messages=tuple(ChatMessage(role, content) for role, content in messages),
        **fields,
    )


def answer(service, chat, cancel=None) -> tuple[list, Finished]:
    events = list(service.run(chat, cancel or CancelToken()))
    assert isinstance(events[0], Accepted)
    assert isinstance(events[-1], Finished)
    return events, events[-1]


def talk(service, model_id, turns, messages=None, **fields):
    """Run a conversation as a client does (whole history each time)."""
    messages = list(messages or [("system", SYSTEM)])
    results = []
    for i in range(1, turns + 1):
        messages.append(("user", user_turn(i)))
        events, final = answer(service, request(model_id, messages, **fields))
        messages.append(("assistant", final.text))
        results.append((events, final))
    return messages, results


def test_the_second_request_computes_only_its_new_tokens(engine, model_id, make_preset):
    service = CompletionService(engine, make_preset())
    messages, results = talk(service, model_id, 2)
    first, second = results[0][1], results[1][1]
    assert first.cached_tokens == 0 and first.key == second.key
    assert second.cached_tokens > 0
    # Reuse stops where the re-rendered last reply differs from the generated ids
    # (random weights), never earlier: the first request's prompt is all reused.
    assert second.cached_tokens >= first.prompt_tokens
    assert second.swapless["new_tokens"] == second.prompt_tokens - second.cached_tokens
    text = "".join(e.text for e in results[1][0] if isinstance(e, TextDelta))
    assert text == second.text and second.completion_tokens == 16
    assert second.finish_reason == "length"


def test_over_the_limit_with_auto_trim_off_is_refused_with_the_numbers(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset(max_context=256, auto_trim=False))
    long_text = " ".join(user_turn(i) for i in range(12))
    chat = request(model_id, [("system", SYSTEM), ("user", long_text)], max_tokens=20)
    run = service.run(chat, CancelToken())
    with pytest.raises(ContextLengthExceeded) as caught:
        next(run)  # refused before anything is accepted or allocated
    error = caught.value
    details = error.details
    assert error.status == 400 and error.code == "context_length_exceeded"
    assert details["effective_limit"] == 256 and details["max_tokens"] == 20
    assert details["prompt_tokens"] > 236 and details["auto_trim"] is False
    assert str(details["prompt_tokens"]) in str(error) and "256" in str(error)
    assert service.recent[-1].outcome == "refused"


def test_a_long_conversation_is_trimmed_and_the_trim_is_remembered(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset(max_context=512))
    messages = [("system", SYSTEM)]
    trimmed_at = None
    for i in range(1, 25):
        messages.append(("user", user_turn(i)))
        events, final = answer(service, request(model_id, messages))
        messages.append(("assistant", final.text))
        assert final.prompt_tokens + 16 <= 512  # never past the limit
        assert final.swapless["effective_limit"] == 512
        if final.swapless["trimmed"]:
            trims = [e for e in events if isinstance(e, TrimApplied)]
            assert len(trims) == 1 and trims[0].outcome.cache_method == "splice"
            assert final.swapless["summary_tokens"] > 0
            assert final.swapless["dropped_messages"] > 0
            if trimmed_at is None:
                trimmed_at = i
                summarized = final.swapless["summarized_messages"]
                assert summarized == final.swapless["dropped_messages"]
        elif trimmed_at is not None and i == trimmed_at + 1:
            # The next request maps the client's full history onto the summary:
            # it is not trimmed again, and the spliced cache is reused.
            assert final.swapless["summarized_messages"] == summarized
            assert final.swapless["summary_tokens"] > 0
            assert final.cached_tokens > 0.6 * final.prompt_tokens
    assert trimmed_at is not None
    assert len(service.records) >= 1


def test_memory_pressure_trims_earlier_and_drops_idle_caches_first(
    engine, model_id, make_preset
):
    level = {"now": "normal"}
    service = CompletionService(
        engine, make_preset(max_context=1024), pressure=lambda: level["now"]
    )
    # An idle conversation holds a cache.
    _, idle = talk(service, model_id, 1, [("system", "Another conversation.")])
    idle_key = idle[0][1].key
    assert engine.cache_state(idle_key).tokens > 0
    messages = [("system", SYSTEM)]
    turn = 0
    while True:  # grow the conversation to just under 3/4 of the limit
        turn += 1
        messages.append(("user", user_turn(turn)))
        prompt = len(engine.render([{"role": r, "content": c} for r, c in messages]))
        if prompt + 16 > 768:
            break
        _, final = answer(service, request(model_id, messages))
        assert not final.swapless["trimmed"]
        messages.append(("assistant", final.text))
    # Without pressure this request fits (it is under the limit of 1024)...
    assert 768 < prompt + 16 <= 1024
    level["now"] = "warning"
    _, final = answer(service, request(model_id, messages))
    # ...under pressure it is trimmed at 3/4 of the limit, idle caches dropped first.
    assert final.swapless["trimmed"] and final.swapless["memory_pressure"] == "warning"
    assert "memory pressure is high" in final.swapless["trim_reason"]
    assert final.prompt_tokens + 16 <= 768
    assert engine.cache_state(idle_key).tokens == 0
    level["now"] = "critical"
    messages += [("assistant", final.text), ("user", user_turn(turn + 1))]
    with pytest.raises(ServiceUnavailable) as caught:
        list(service.run(request(model_id, messages), CancelToken()))
    assert caught.value.status == 503 and caught.value.code == "memory_pressure"


def test_a_prompt_that_cannot_fit_even_trimmed_is_refused(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset(max_context=256))
    huge = " ".join(user_turn(i) for i in range(20))
    with pytest.raises(ContextLengthExceeded, match="no older history"):
        list(service.run(request(model_id, [("user", huge)]), CancelToken()))


class CancelAtPoll(CancelToken):
    """Cancels itself when the engine polls it for the ``n``-th time."""

    def __init__(self, n: int):
        super().__init__()
        self.n = n
        self.polls = 0

    def __call__(self) -> bool:
        self.polls += 1
        if self.polls >= self.n:
            self.cancel()
        return super().__call__()


def test_a_cancelled_reply_stops_within_a_token_and_its_cache_stays_reusable(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset(max_tokens=2000))
    chat = request(model_id, [("system", SYSTEM), ("user", user_turn(1))])
    # The engine polls once before the prompt's only prefill chunk, then after every
    # token: cancelled at the 6th poll, it must stop right after the 5th token.
    cancel = CancelAtPoll(6)
    events = list(service.run(chat, cancel))
    final = events[-1]
    assert isinstance(final, Finished) and final.finish_reason == "cancelled"
    assert final.swapless["cancelled"] is True
    assert final.completion_tokens == 5 and cancel.polls == 6
    held = engine.cache_state(final.key).tokens
    assert held == final.prompt_tokens + 5
    _, again = answer(service, chat)  # the client retries: the cache is reused
    assert again.key == final.key
    assert again.cached_tokens == again.prompt_tokens - 1


def test_stop_sequences_end_the_reply_and_seeds_repeat_it(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset(max_tokens=40))
    messages = [("system", SYSTEM), ("user", user_turn(3))]
    _, plain = answer(service, request(model_id, messages))
    stop = plain.text[12:15]
    cut = plain.text[: plain.text.index(stop)]
    _, stopped = answer(service, request(model_id, messages, stop=(stop, "never!")))
    assert stopped.text == cut and stopped.finish_reason == "stop"
    sampled = [
        answer(service, request(model_id, messages, temperature=1.0, seed=seed))[1].text
        for seed in (7, 7, 8)
    ]
    assert sampled[0] == sampled[1] != sampled[2]


def test_the_model_name_must_be_the_served_one(engine, model_id, make_preset):
    service = CompletionService(engine, make_preset())
    assert service.model_id() == model_id
    with pytest.raises(RequestError) as caught:
        next(service.run(request("gpt-4o", [("user", "hi")]), CancelToken()))
    assert caught.value.code == "model_not_found" and model_id in str(caught.value)
    _, final = answer(service, request("swapless", [("user", "hi")]))
    assert final.completion_tokens == 16


def test_requests_from_many_threads_all_finish_on_the_one_engine(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset())
    finals, errors = {}, []
    previous = engine.max_idle_caches
    engine.set_max_idle_caches(4)  # as `LocalServer` does: room for each client

    def client(n):
        try:
            _, results = talk(service, model_id, 2, [("system", f"Client {n}.")])
            finals[n] = [f for _, f in results]
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    engine.set_max_idle_caches(previous)
    assert not errors and len(finals) == 4
    assert len({f[0].key for f in finals.values()}) == 4  # a cache each
    assert all(f[1].cached_tokens > 0 for f in finals.values())


def test_a_new_conversation_gets_a_long_shared_system_prompt_from_the_prefix_cache(
    engine, model_id, make_preset
):
    service = CompletionService(engine, make_preset())
    system = "You are the release assistant of the Swapless project. " * 12
    system_tokens = len(engine.render([{"role": "system", "content": system}], False))
    assert system_tokens >= 64  # long enough for the prefix cache
    _, first = answer(
        service, request(model_id, [("system", system), ("user", user_turn(1))])
    )
    _, other = answer(
        service, request(model_id, [("system", system), ("user", "Something else.")])
    )
    assert other.key != first.key  # a conversation of its own...
    assert other.cached_tokens >= system_tokens  # ...that did not prefill the prompt
