"""Recall: does a fact that lives only in trimmed turns come back, on the reference model?

Seeded synthetic conversations run through the product's own path — a real store, a
`ConversationSession` at a limit of 512 tokens, the extractive summary, recall, the
reference model's greedy reply — and are scored by exact match: the reply holds the
fact's value (for an updated fact: the newer value, and not the older one). Cells: the
summary alone vs the summary + recall, for a fact nobody mentioned since (dormant), one
referred to again (without its value), one among distractor facts, and one whose value
was later updated. Intervals are Wilson 95 %. The part also times the recall step on a
5,000-message conversation (the target: at most 50 ms per turn).
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.results import NotAvailable, PartResult, Row, yes_no
from app.core.cancel import CancelToken

NAME = "recall"
TITLE = "Recall of trimmed facts on the reference model (limit 512)"
LIMIT = 512
FULL_CASES = 200
QUICK_CASES = 12
KINDS = ("dormant", "referred", "distractors", "updated")
# "first": the extractive summary as it was before this part existed (first sentence of
# each dropped message, newest first), no recall; "summary": today's facts-first
# extractive summary, no recall; "recall": that summary + recall.
MODES = ("first", "summary", "recall")
# Cells run today's summary and recall first, the earlier summary last: a run cut
# short still holds the cells that compare today with recall.
RUN_ORDER = ("summary", "recall", "first")
MODE_LABELS = {
    "first": "first-sentence summary (before)",
    "summary": "facts-first summary alone",
    "recall": "facts-first summary + recall",
}
HISTORY_TOKENS = 900
OVERHEAD_MESSAGES = 5_000
OVERHEAD_REPS = 30
TARGET_RECALL = 0.8
TARGET_OVERHEAD_MS = 50.0
SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class Case:
    """One synthetic conversation and what its last question must recall."""

    kind: str
    history: tuple[tuple[str, str], ...]
    question: str
    answer: str
    old_answer: str | None


def available(ctx: BenchContext) -> str | None:
    """Available when the committed reference model is in this installation."""
    from app.bench.parts.fidelity import available as fidelity_available

    return fidelity_available(ctx)


def make_case(kind: str, rng: random.Random, filler) -> Case:
    """Build one conversation of ``kind`` from ``rng`` (seeded: the same every run)."""
    from app.core.quality import recall_tasks as tasks

    subject, question, value = tasks.fact(rng)
    turns: list[tuple[str, str]] = []

    def add(messages: list[dict]) -> None:
        turns.extend((m["role"], m["content"]) for m in messages)

    def add_filler(tokens: int) -> None:
        add(tasks.filler_turns(rng, filler, tokens))

    add(tasks.fact_turns(subject, value))
    old_answer = None
    if kind == "distractors":
        taken = [subject]
        for _ in range(3):
            add_filler(96)
            other, _, other_value = tasks.fact(rng, exclude=tuple(taken))
            taken.append(other)
            add(tasks.fact_turns(other, other_value))
    elif kind == "referred":
        add_filler(192)
        add(
            [
                {"role": "user", "content": f"Keep my {subject} in mind for later."},
                {"role": "assistant", "content": f"I will remember your {subject}."},
            ]
        )
    elif kind == "updated":
        add_filler(192)
        old_answer = value
        while value == old_answer:
            if "number" in subject:
                value = "".join(
                    str(rng.randrange(10)) for _ in range(rng.randint(2, 4))
                )
            else:
                value = rng.choice(tasks.FACT_WORDS)
        add(
            [
                {"role": "user", "content": f"Update: my {subject} is now {value}."},
                {"role": "assistant", "content": f"Noted: your {subject} is {value}."},
            ]
        )
    spent = sum(len(text) for _, text in turns) // 4
    add_filler(max(HISTORY_TOKENS - spent, 96))
    return Case(kind, tuple(turns), question, value, old_answer)


def wilson(hits: int, total: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of ``hits`` out of ``total`` (95 % by default)."""
    if total == 0:
        return 0.0, 1.0
    p = hits / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = (
        z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denominator
    )
    return max(0.0, centre - half), min(1.0, centre + half)


def run(ctx: BenchContext) -> PartResult:
    """Run every cell on the reference model, then time recall on a long conversation."""
    from app.bench.parts.fidelity import _reference_engine
    from app.core.quality.probes import text_filler
    from app.core.store import Store

    if ctx.scratch is None and ctx.out_dir is None:
        raise NotAvailable("no scratch folder for the reference model")
    engine, _ = _reference_engine(ctx)
    folder = Path(ctx.scratch or ctx.out_dir) / "recall"
    folder.mkdir(parents=True, exist_ok=True)
    cases_per_cell = ctx.settings.recall_cases or (
        QUICK_CASES if ctx.settings.quick else FULL_CASES
    )
    try:
        loaded = engine.submit(engine._require_model).result()
        tokenizer = loaded.tokenizer
        filler = text_filler(
            lambda text: tokenizer.encode(text, add_special_tokens=False),
            tokenizer.decode,
        )
        store = Store.open(folder / "recall.db")
        try:
            cells = _run_cells(ctx, engine, store, filler, cases_per_cell)
            overhead = _overhead(engine, store)
        finally:
            store.close()
    finally:
        engine.shutdown()
    return _result(cells, overhead, cases_per_cell)


def _preset(mode: str):
    from app.core.presets.presets import get_preset

    return get_preset("chat").with_changes(
        system_prompt=SYSTEM_PROMPT,
        max_context=LIMIT,
        max_tokens=16,
        temperature=0.0,
        summary_mode="extractive",
        kv_bits=16,
        recall=mode == "recall",
        # No thinking budget of its own: a budget is room on top of max_tokens, and
        # the chat preset's would not fit the 512-token limit (any reasoning shares
        # the reply's 16 tokens, as when this part was measured).
        thinking_budget=0,
    )


def _run_cells(ctx, engine, store, filler, count: int) -> dict:
    from app.core.chat.conversation_session import ConversationSession
    from app.core.engine.quality.quality_scoring import ChatRenderer

    loaded = engine.submit(engine._require_model).result()
    chat = ChatRenderer(loaded.tokenizer)
    cells: dict = {}
    cases_of = {
        kind: [
            make_case(kind, random.Random(f"{kind}-{i}"), filler) for i in range(count)
        ]
        for kind in KINDS
    }
    modes = [mode for mode in RUN_ORDER if mode in MODES]
    for mode, kind in [(mode, kind) for mode in modes for kind in KINDS]:
        cases = cases_of[kind]
        started = time.perf_counter()
        outcome: dict[str, float] = {
            "hits": 0,
            "total": 0,
            "fact_trimmed": 0,
            "recalled_fact": 0,
            "generated_hits": 0,
            "old_value": 0,
        }
        for case in cases:
            session = ConversationSession.start(
                engine, store, _preset(mode), model="reference", seed=0
            )
            # One transaction for the whole history (a commit per message was
            # an eighth of the part's time; what is stored is the same).
            with store._writing():
                for role, text in case.history:
                    store.add_message(session.conversation_id, role, text)
            first_id = store.messages(session.conversation_id)[0].id
            with _summary_as(mode):
                report = session.send(case.question).wait()
            engine.drop_cache(session.cache_key)
            # Scored as the fidelity part scores dropped facts: the reply's lead
            # ("Your locker number is") is given, the value must be greedy.
            messages = session.model_messages(session.context())
            subject = _subject_of(case)
            turns = [
                messages[-2],
                {
                    "role": "assistant",
                    "content": f"Your {subject} is {case.answer}.",
                },
            ]
            right = engine.submit(
                _answers, loaded, chat, messages[:-2], turns, case.answer
            ).result()
            reply = report.reply
            outcome["hits"] += right
            outcome["total"] += 1
            outcome["generated_hits"] += case.answer in reply and (
                case.old_answer is None or case.old_answer not in reply
            )
            outcome["old_value"] += bool(case.old_answer and case.old_answer in reply)
            outcome["fact_trimmed"] += store.get_message(first_id).trimmed
            outcome["recalled_fact"] += any(
                case.answer in r.text for r in report.recalled
            )
        outcome["seconds"] = time.perf_counter() - started
        cells[f"{mode}:{kind}"] = outcome
        if ctx.scratch is not None:
            # A run cut short keeps the cells it finished.
            (Path(ctx.scratch) / "recall" / "cells.json").write_text(
                json.dumps(cells, indent=1)
            )
        ctx.log(
            f"  recall: {mode}/{kind} {outcome['hits']}/{outcome['total']} "
            f"in {outcome['seconds']:.0f} s"
        )
    return cells


@contextlib.contextmanager
def _summary_as(mode: str) -> Iterator[None]:
    """Use the earlier first-sentence extractive summary while ``mode`` is "first"."""
    from app.core.chat import trimmer

    if mode != "first":
        yield
        return
    saved = trimmer.extractive_summary
    trimmer.extractive_summary = _first_sentence_summary
    try:
        yield
    finally:
        trimmer.extractive_summary = saved


def _first_sentence_summary(
    messages: list[tuple[str, str]],
    max_tokens: int,
    count_tokens: Callable[[str], int],
    previous_summary: str = "",
    cancel: CancelToken | None = None,
) -> str:
    """The extractive summary before this part: first sentences, newest kept first."""
    from app.core.trim.extractive import HEADER, first_sentence

    lines = []
    for role, content in messages:
        sentence = first_sentence(content)
        if sentence:
            lines.append(f"- {'User' if role == 'user' else 'Assistant'}: {sentence}")
    while len(lines) > 1 and count_tokens("\n".join([HEADER, *lines])) > max_tokens:
        lines.pop(0)
    return "\n".join([HEADER, *lines])


def _subject_of(case: Case) -> str:
    from app.core.quality.recall_tasks import FACT_SUBJECTS

    return next(
        subject for subject, question in FACT_SUBJECTS if question == case.question
    )


def _answers(loaded, chat, messages, turns, answer) -> bool:
    """Greedy recall of ``answer`` in the reply to ``turns`` (engine thread)."""
    from app.core.engine.quality import quality_scoring as scoring

    asked = chat.question(messages, turns, answer)
    cache = scoring.new_cache(loaded.model, scoring.FULL_PRECISION)
    chunk = scoring.chunk_size(int(loaded.config.get("vocab_size") or 0))
    return bool(
        scoring.answer_correct(
            loaded.model, cache, asked.lead_ids, asked.answer_ids, chunk
        )
    )


def _overhead(engine, store) -> dict:
    """Median time of the recall step before a turn of a 5,000-message conversation."""
    from app.core.chat.conversation_session import ConversationSession

    session = ConversationSession.start(
        engine, store, _preset("recall"), model="reference"
    )
    rng = random.Random(5000)
    words = "river hill valley lantern meadow ledger harbor summit quartz willow"
    vocabulary = words.split()
    ids = []
    with store._writing():  # one transaction: the same rows, a commit instead of 5,000
        for i in range(OVERHEAD_MESSAGES):
            role = "user" if i % 2 == 0 else "assistant"
            text = " ".join(rng.choice(vocabulary) for _ in range(24)) + f" item {i}."
            ids.append(store.add_message(session.conversation_id, role, text))
    store.add_summary(
        session.conversation_id, ids[0], ids[-11], "summary", 8, "extractive"
    )
    context = session.context()
    timings = []
    for rep in range(OVERHEAD_REPS):
        question = f"What about the {vocabulary[rep % len(vocabulary)]} and item {rep}?"
        started = time.perf_counter()
        result = session.recall(context, question, session.recall_reserve())
        timings.append((time.perf_counter() - started) * 1000)
        assert result.candidates > 0
    return {
        "messages": OVERHEAD_MESSAGES,
        "median_ms": statistics.median(timings),
        "max_ms": max(timings),
        "reps": OVERHEAD_REPS,
    }


def _result(cells: dict, overhead: dict, count: int) -> PartResult:
    result = PartResult()
    for outcome in cells.values():
        low, high = wilson(outcome["hits"], outcome["total"])
        outcome["share"] = outcome["hits"] / outcome["total"] if outcome["total"] else 0
        outcome["wilson_95"] = [low, high]
    result.figures = {
        "limit": LIMIT,
        "cases_per_cell": count,
        "cells": cells,
        "overhead": overhead,
    }
    for kind in KINDS:
        for mode in MODES:
            if f"{mode}:{kind}" not in cells:  # a run cut short, or narrowed
                continue
            outcome = cells[f"{mode}:{kind}"]
            low, high = outcome["wilson_95"]
            label = MODE_LABELS[mode]
            met = outcome["share"] >= TARGET_RECALL if mode == "recall" else None
            result.rows.append(
                Row(
                    f"Trimmed fact, {kind}: {label}",
                    f"{outcome['hits']}/{outcome['total']} ({outcome['share']:.0%})",
                    f"95 % {low:.0%}–{high:.0%}; fact trimmed in "
                    f"{outcome['fact_trimmed']}/{outcome['total']}",
                    f"≥ {TARGET_RECALL:.0%}" if mode == "recall" else "—",
                    yes_no(met),
                )
            )
    held = overhead["median_ms"] <= TARGET_OVERHEAD_MS
    result.rows.append(
        Row(
            f"Recall step before a turn, {overhead['messages']:,}-message conversation",
            f"{overhead['median_ms']:.1f} ms median",
            f"max {overhead['max_ms']:.1f} ms, {overhead['reps']} turns",
            f"≤ {TARGET_OVERHEAD_MS:.0f} ms",
            yes_no(held),
        )
    )
    # A run restricted to some modes or kinds (KINDS/MODES narrowed) reports only those.
    shares = {}
    for mode, ratio in (
        ("recall", "recall_trimmed_fact_share"),
        ("summary", "summary_trimmed_fact_share"),
        ("first", "first_sentence_trimmed_fact_share"),
    ):
        run_cells = [cells[f"{mode}:{k}"] for k in KINDS if f"{mode}:{k}" in cells]
        total = sum(c["total"] for c in run_cells)
        if total:
            shares[ratio] = sum(c["hits"] for c in run_cells) / total
    result.ratios.update(shares)
    if "recall_trimmed_fact_share" in shares:
        result.targets_met["recall_trimmed_fact_share"] = (
            shares["recall_trimmed_fact_share"] >= TARGET_RECALL
        )
    result.ratios["recall_overhead_ms"] = overhead["median_ms"]
    result.targets_met["recall_overhead_ms"] = held
    result.notes.append(
        "Exact match as the fidelity part scores it: after the prompt the product "
        "built (its own ConversationSession: stored, trimmed, recalled), the reply's "
        'lead ("Your locker number is") is given and every token of the value must '
        "be the trained reference model's greedy choice (docs/reference-model.md); "
        "for an updated fact, the new value. generated_hits counts free greedy replies "
        "that contain the value (the tiny model rarely starts its reply that way). "
        "The summary is the extractive one (facts first), the same in both modes."
    )
    return result


def draw_recall_cells(results: dict, path: Path) -> bool:
    """Bar chart of each cell's share with Wilson intervals; False without data."""
    part = results.get("parts", {}).get(NAME)
    if not part or part.get("status") != "ok":
        return False
    from app.bench.report.pyplot import pyplot

    cells = part["figures"]["cells"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    width = 0.27
    colours = {"first": "#bbbbbb", "summary": "#6baed6", "recall": "#2ca02c"}
    for offset, mode in enumerate(MODES):
        xs: list[float] = []
        ys: list[float] = []
        errors: list[list[float]] = [[], []]
        for index, kind in enumerate(KINDS):
            if f"{mode}:{kind}" not in cells:
                continue
            outcome = cells[f"{mode}:{kind}"]
            low, high = outcome["wilson_95"]
            xs.append(index + (offset - 1) * width)
            ys.append(outcome["share"])
            errors[0].append(max(outcome["share"] - low, 0.0))
            errors[1].append(max(high - outcome["share"], 0.0))
        ax.bar(
            xs,
            ys,
            width,
            yerr=errors,
            color=colours[mode],
            label=MODE_LABELS[mode],
            capsize=3,
        )
    ax.axhline(TARGET_RECALL, color="#d62728", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(KINDS)), KINDS)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("trimmed fact recalled (exact match)")
    total = part["figures"]["cases_per_cell"]
    ax.set_title(f"Reference model, limit {LIMIT}: {total} conversations per cell")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
