"""Synthetic recall tasks: deterministic, and their answers are where they claim."""

from __future__ import annotations

import random

from app.core.quality import recall_tasks


def words(tokens: int, rng: random.Random) -> str:
    return " ".join(
        rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(tokens)
    )


def test_a_seed_fixes_every_task():
    def make(seed):
        rng = random.Random(seed)
        return [
            recall_tasks.pass_key_task(rng, 32, words),
            recall_tasks.key_value_task(rng, 12, words),
            recall_tasks.copy_task(rng, 20, words),
            recall_tasks.chat_fact_task(rng, 200, words),
        ]

    assert make(3) == make(3)
    assert make(3) != make(4)


def test_the_answer_is_stated_before_it_is_asked_and_ends_the_reply():
    rng = random.Random(0)
    for task in (
        recall_tasks.pass_key_task(rng, 50, words),
        recall_tasks.key_value_task(rng, 30, words, distance=20),
        recall_tasks.chat_fact_task(rng, 300, words),
    ):
        reply = task.messages[-1]["content"]
        assert task.messages[-1]["role"] == "assistant"
        assert reply.rstrip(".").endswith(task.answer)
        assert task.reply_prefix + task.answer == reply.rstrip(".")
        earlier = " ".join(m["content"] for m in task.question)
        assert task.answer in earlier


def test_key_value_tables_have_one_line_per_key():
    rng = random.Random(1)
    for _ in range(20):
        task = recall_tasks.key_value_task(rng, 40, words)
        table = task.messages[0]["content"].splitlines()[1:41]
        keys = [line.split(":")[0] for line in table]
        assert len(set(keys)) == 40
        asked = task.messages[-1]["content"].split(":")[0]
        assert keys.count(asked) == 1


def test_chat_facts_leave_filler_turns_between_fact_and_question():
    task = recall_tasks.chat_fact_task(random.Random(2), 400, words, turn_tokens=100)
    roles = [m["role"] for m in task.messages]
    assert roles[0] == "system"
    assert roles[1:] == ["user", "assistant"] * ((len(roles) - 1) // 2)
    assert len(task.messages) == 1 + 2 + 2 * 4 + 2
