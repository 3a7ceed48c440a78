"""Synthetic in-context recall tasks: the reference model's training mix and its probes.

Compression damages a model only where the model reads its context; a perplexity on
plain prose hardly moves (shared/NOTES-mlx.md: a text-only model understates 4-bit KV
damage 5–7×). So the reference model is trained on, and every model is probed with,
tasks whose answer is somewhere earlier in the context: a pass key hidden in filler, a
key→value table, a copied span, a fact stated in an earlier chat turn.

Every task is a list of chat messages whose last one is the assistant's reply, built
from a `random.Random` so a seed fixes it, plus the exact answer text inside that
reply. Filler comes from a callable, so the same task shapes serve the training
corpus (engine side, tokenized) and the probes shipped under ``resources/quality``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

# What the pass key is called: a few wordings, so the model learns the pattern rather
# than one sentence, and a probe's wording is one the model has seen.
KEY_NAMES = ("pass key", "secret code", "access number", "magic number")
# ChatML conversation facts: (subject, question) pairs; the value is drawn per task.
FACT_SUBJECTS = (
    ("favourite colour", "What is my favourite colour?"),
    ("project code name", "What is the project code name?"),
    ("meeting room", "Which meeting room did I book?"),
    ("locker number", "What is my locker number?"),
    ("cat's name", "What is my cat's name?"),
    ("flight number", "What is my flight number?"),
)
FACT_WORDS = (
    "amber", "teal", "crimson", "indigo", "olive", "saffron", "cobalt", "ivory",
    "falcon", "juniper", "maple", "orchid", "pebble", "quartz", "raven", "tundra",
    "willow", "zephyr", "harbor", "lantern", "meadow", "nebula", "prairie", "summit",
)  # fmt: skip

Filler = Callable[[int, random.Random], str]


@dataclass(frozen=True)
class RecallTask:
    """One task: messages ending in the assistant's reply, and the answer inside it.

    Attributes:
        kind: ``pass_key``, ``key_value``, ``copy`` or ``chat_fact``.
        messages: Chat messages; the last is the assistant's reply containing `answer`.
        answer: The text to recall, a suffix of ``messages[-1]["content"]`` without
            trailing punctuation.
        distance: Filler tokens asked for between the fact and the question.
    """

    kind: str
    messages: tuple[dict, ...]
    answer: str
    distance: int

    @property
    def reply_prefix(self) -> str:
        """The assistant's reply up to the answer (what is fed before scoring)."""
        reply = self.messages[-1]["content"]
        return reply[: reply.rindex(self.answer)]

    @property
    def question(self) -> tuple[dict, ...]:
        """Every message but the assistant's reply."""
        return self.messages[:-1]


def _digits(rng: random.Random, low: int = 4, high: int = 7) -> str:
    return "".join(str(rng.randrange(10)) for _ in range(rng.randint(low, high)))


def pass_key_task(
    rng: random.Random, distance: int, filler: Filler, key: str | None = None
) -> RecallTask:
    """A number stated once, ``distance`` filler tokens before the question about it.

    Args:
        rng: Source of every random choice.
        distance: Filler tokens between the key and the question.
        filler: ``filler(tokens, rng)`` returns about that many tokens of text.
        key: The key to hide (default: 4–7 random digits).
    """
    name = rng.choice(KEY_NAMES)
    key = key or _digits(rng)
    user = (
        f"The {name} is {key}. Remember it.\n{filler(distance, rng)}\n"
        f"What is the {name}?"
    )
    reply = f"The {name} is {key}."
    return RecallTask(
        "pass_key",
        ({"role": "user", "content": user}, {"role": "assistant", "content": reply}),
        key,
        distance,
    )


def _distinct_pairs(rng: random.Random, count: int) -> list[tuple[str, int]]:
    chosen: set[tuple[str, int]] = set()
    while len(chosen) < count:
        chosen.add((rng.choice(FACT_WORDS), rng.randrange(10, 100)))
    return sorted(chosen, key=lambda _: rng.random())


def key_value_task(
    rng: random.Random, pairs: int, filler: Filler, distance: int = 0
) -> RecallTask:
    """A table of ``pairs`` key→number lines, then a lookup of one of them."""
    # Distinct keys, none a prefix of another, so exactly one line answers.
    keys = [f"{w}-{n}" for w, n in _distinct_pairs(rng, pairs)]
    values = [_digits(rng, 3, 5) for _ in keys]
    table = "\n".join(f"{k}: {v}" for k, v in zip(keys, values, strict=True))
    index = rng.randrange(pairs)
    gap = f"\n{filler(distance, rng)}\n" if distance else "\n"
    user = f"Here is a table.\n{table}{gap}What is the value of {keys[index]}?"
    reply = f"{keys[index]}: {values[index]}"
    return RecallTask(
        "key_value",
        ({"role": "user", "content": user}, {"role": "assistant", "content": reply}),
        values[index],
        distance,
    )


def copy_task(rng: random.Random, length: int, filler: Filler) -> RecallTask:
    """A span of text to repeat word for word."""
    span = filler(length, rng).strip()
    user = f"Repeat this text exactly.\n{span}"
    return RecallTask(
        "copy",
        ({"role": "user", "content": user}, {"role": "assistant", "content": span}),
        span,
        0,
    )


def fact(rng: random.Random, exclude: tuple[str, ...] = ()) -> tuple[str, str, str]:
    """A random ``(subject, question, value)`` conversation fact.

    Args:
        rng: Source of the choice.
        exclude: Subjects not to use (another fact of the same conversation).
    """
    subject, question = rng.choice([f for f in FACT_SUBJECTS if f[0] not in exclude])
    value = rng.choice(FACT_WORDS) if "number" not in subject else _digits(rng, 2, 4)
    return subject, question, value


def fact_turns(subject: str, value: str) -> list[dict]:
    """The user stating a fact and the assistant acknowledging it."""
    return [
        {"role": "user", "content": f"My {subject} is {value}."},
        {"role": "assistant", "content": f"Noted: your {subject} is {value}."},
    ]


def filler_turns(
    rng: random.Random, filler: Filler, tokens: int, turn_tokens: int = 96
) -> list[dict]:
    """User/assistant turns of filler text, about ``tokens`` tokens in all."""
    turns: list[dict] = []
    spent = 0
    while spent < tokens:
        step = min(turn_tokens, tokens - spent)
        turns.append({"role": "user", "content": filler(max(step // 2, 1), rng)})
        turns.append(
            {"role": "assistant", "content": filler(max(step - step // 2, 1), rng)}
        )
        spent += step
    return turns


def answer_turns(subject: str, question: str, value: str) -> list[dict]:
    """The question about a fact and the reply that recalls it."""
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": f"Your {subject} is {value}."},
    ]


def chat_fact_task(
    rng: random.Random,
    distance: int,
    filler: Filler,
    turn_tokens: int = 96,
    system_prompt: str = "You are a helpful assistant.",
) -> RecallTask:
    """A fact told in the first user turn, asked for after filler turns.

    The filler is split into user/assistant turns of about ``turn_tokens`` each, so a
    trim can drop or keep the turn holding the fact.
    """
    subject, question, value = fact(rng)
    messages: list[dict] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages += fact_turns(subject, value)
    messages += filler_turns(rng, filler, distance, turn_tokens)
    messages += answer_turns(subject, question, value)
    return RecallTask("chat_fact", tuple(messages), value, distance)
