"""Clients' branches are bounded by their KV bytes, least recently used first out.

First the index alone, with sizes given (many branches, a budget, a hot branch used
between every other); then the real server on the tiny model through the `openai`
client, with the byte budget set to about two and a half conversations: whatever
comes and goes, the caches the server's branches hold never pass it, and the hot
conversation keeps its cache.
"""

from __future__ import annotations

import pytest

from app.server.service.conversation_index import ConversationIndex
from tests.server.test_openai_client import client_for

BRANCH_BYTES = 1000


def test_the_index_holds_branches_to_the_budget_and_keeps_the_hot_one():
    dropped: list[str] = []
    index = ConversationIndex(
        cached_tokens=lambda key: 1,
        budget_bytes=lambda: int(3.5 * BRANCH_BYTES),
        drop=dropped.append,
    )

    def run(tokens: list[int]) -> str:
        lease = index.acquire((), 0, tokens)
        index.release(lease, (), tokens, BRANCH_BYTES)
        return lease.key

    hot = [7] * 300
    hot_key = run(hot)
    for i in range(40):
        hot = [*hot, i]  # the hot conversation grows by a turn
        assert run(hot) == hot_key  # it continues its own cache every time
        run([1000 + i] * 300)  # a stranger: a branch of its own
        assert index.branch_bytes() <= 3.5 * BRANCH_BYTES
    assert hot_key in index.branches and hot_key not in dropped
    assert len(dropped) == 41 - 3 and index.evicted[-1] == dropped[-1]
    # Without a budget nothing is evicted for bytes.
    index.budget_bytes = lambda: None
    run([5000] * 300)
    assert len(dropped) == 38


def test_a_busy_branch_is_never_evicted():
    index = ConversationIndex(cached_tokens=lambda key: 1, budget_bytes=lambda: 0)
    busy = index.acquire((), 0, [1] * 300)
    other = index.acquire((), 0, [2] * 300)
    index.release(other, (), [2] * 300, BRANCH_BYTES)
    index.release(busy, (), [1] * 300, BRANCH_BYTES)
    # Each release keeps its own branch; the other, then idle, goes.
    assert list(index.branches._branches) == [busy.key]


@pytest.fixture
def budgeted(serve, make_preset, engine):
    server = serve(make_preset(max_tokens=4))
    client = client_for(server)
    ask = _asker(client)
    ask("conversation zero", 0)  # measures one conversation's bytes
    (key,) = server.service.index.keys()
    one = engine.cache_state(key).kv_bytes
    assert one > 0
    server.service.index.budget_bytes = lambda: int(2.5 * one)
    return server, ask, int(2.5 * one)


def _asker(client):
    def ask(system: str, turns: int):
        messages = [{"role": "system", "content": f"You are {system}. " * 20}]
        for turn in range(turns + 1):
            messages.append({"role": "user", "content": f"Question {turn}?"})
            if turn < turns:
                messages.append({"role": "assistant", "content": f"Answer {turn}."})
        return client.chat.completions.create(model="swapless", messages=messages)

    return ask


def test_the_servers_branches_stay_in_the_byte_budget(budgeted, engine):
    server, ask, budget = budgeted
    index = server.service.index
    previous = ask("the hot one", 0)
    for i in range(6):
        ask(f"stranger number {i}", 0)
        keys = index.keys()  # every key the server used, live or dropped
        held = sum(engine.cache_state(k).kv_bytes for k in keys)
        assert held <= budget
        reply = ask("the hot one", i + 1)
        # The hot conversation continued its own cache: its last prompt was reused.
        assert reply.usage.prompt_tokens_details.cached_tokens >= (
            previous.usage.prompt_tokens
        )
        previous = reply
    assert len(index.evicted) >= 5
