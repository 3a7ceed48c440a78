"""The long-document runner on the real engine (tiny random model) and a real store.

The model's words are noise, so these tests check mechanics: how much KV cache each
step holds, what is saved and when, where a cancelled or interrupted run resumes, and
which mode is chosen and why.
"""

from __future__ import annotations

import random

import pytest

from app.core.budget import ALLOCATION_STEP, kv_bytes_at, read_geometry
from app.core.engine.engine import Engine
from app.core.longdoc import (
    AnswerChunk,
    LongDocumentRunner,
    ReadingProgress,
    RunFinished,
    RunStarted,
    SegmentFinished,
    SegmentStarted,
    read_document,
)
from app.core.longdoc.plan.sizing import KVSizing
from app.core.longdoc.prompts import request_text, segment_messages
from app.core.longdoc.runner import JOIN_SLACK
from app.core.presets.presets import get_preset
from app.core.store import Store

QUESTION = "What does the text say about rivers?"
SEGMENT_TOKENS = 256
NOTES_TOKENS = 16
WORDS = [
    "river",
    "mountain",
    "castle",
    "engine",
    "memory",
    "budget",
    "token",
    "segment",
    "notes",
    "answer",
    "valley",
    "harbour",
    "winter",
    "lantern",
    "signal",
    "archive",
]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    engine = Engine()
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()


@pytest.fixture
def store(tmp_path):
    with Store.open(tmp_path / "longdoc.db") as opened:
        yield opened


@pytest.fixture
def preset():
    return get_preset("long-document").with_changes(
        segment_tokens=SEGMENT_TOKENS,
        summary_max_tokens=NOTES_TOKENS,
        max_tokens=NOTES_TOKENS,
    )


class SpyEngine:
    """The real engine, recording the chats it renders."""

    def __init__(self, engine):
        self._engine = engine
        self.rendered: list[list[dict]] = []

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def render(self, messages, add_generation_prompt=True):
        self.rendered.append(messages)
        return self._engine.render(messages, add_generation_prompt)


def write_document(engine, path, paragraphs: int, seed: int = 0):
    """Write paragraphs of 190-250 tokens: no two fit in one 256-token segment, so
    there is exactly one segment per paragraph."""
    rng = random.Random(seed)
    written = []
    while len(written) < paragraphs:
        sentences = []
        while engine.count_tokens(" ".join(sentences)) < 190:
            words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
            sentences.append(" ".join(words).capitalize() + ".")
        if engine.count_tokens(" ".join(sentences)) <= 250:
            written.append(" ".join(sentences))
    path.write_text("\n\n".join(written) + "\n", encoding="utf-8")
    return read_document(path)


def run(runner, document, question=QUESTION, *, cancel_on=None, **kwargs):
    """Run to the end; ``cancel_on(event)`` returning True cancels the run there."""
    events = []
    for event in runner.run(document, question, **kwargs):
        events.append(event)
        if cancel_on is not None and cancel_on(event):
            runner.cancel()
    return events


def of_type(events, kind):
    return [e for e in events if isinstance(e, kind)]


def test_twenty_segments_hold_no_more_kv_than_one_segment(
    engine, store, preset, tmp_path, tiny_model_dir
):
    document = write_document(engine, tmp_path / "long.txt", paragraphs=20)
    runner = LongDocumentRunner(engine, store, preset, seed=0)
    cached_between_segments = []
    events = []
    for event in runner.run(document, QUESTION, mode="segments"):
        events.append(event)
        if isinstance(event, SegmentFinished):
            key = f"conversation-{events[0].conversation_id}"
            cached_between_segments.append(engine.cache_state(key).tokens)
    started, finished = events[0], events[-1]
    reports = of_type(events, SegmentFinished)
    assert started.mode == "segments" and started.segments == 20
    assert [r.index for r in reports] == list(range(20))

    # The bound, computed independently of the runner: the prompt measured with empty
    # notes and segment, plus a full segment, notes in and notes out.
    overhead = len(
        engine.render(segment_messages(preset.system_prompt, QUESTION, "", "", 19, 20))
    )
    bound_tokens = overhead + JOIN_SLACK + SEGMENT_TOKENS + 2 * NOTES_TOKENS
    # Rounded up to the 256-token step, plus one step: mlx-lm grows a cache that
    # holds the odd-length cached prefix by whole steps past it.
    bound_bytes = kv_bytes_at(
        read_geometry(tiny_model_dir),
        bound_tokens + ALLOCATION_STEP - 1,
        4,
        64,
        act_dtype_bytes=4,
    )
    # Reading the document in one go would need many times that.
    assert started.document_tokens > 7 * bound_tokens
    for report in reports:
        assert report.tokens <= SEGMENT_TOKENS
        assert report.context_tokens <= bound_tokens
        assert 0 < report.kv_bytes <= bound_bytes
        assert report.notes_tokens <= NOTES_TOKENS
        assert report.peak_memory_bytes > 0 and report.seconds > 0
    # Between segments only the system prompt and the question stay cached.
    assert 0 < started.prefix_tokens < 150
    assert cached_between_segments == [started.prefix_tokens] * 20
    assert finished.max_kv_bytes == max(
        r.kv_bytes for r in reports
    )  # the answer step is smaller than a segment step
    assert finished.max_kv_bytes <= started.kv_bytes_limit <= bound_bytes
    assert not finished.cancelled and finished.next_segment == 20
    assert finished.answer and finished.answer == "".join(
        e.text for e in of_type(events, AnswerChunk)
    )

    # Every segment's notes are stored, and the run is recorded in the conversation.
    saved = store.document_segments(started.document_id)
    assert [(s.segment_index, s.token_count) for s in saved] == [
        (r.index, r.tokens) for r in reports
    ]
    assert all(s.kv_bytes == r.kv_bytes for s, r in zip(saved, reports, strict=True))
    assert store.get_document(started.document_id).status == "complete"
    messages = store.messages(started.conversation_id)
    assert [(m.role, m.state) for m in messages] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert messages[0].content == request_text("long.txt", QUESTION)
    assert messages[1].content == finished.answer


def test_cancel_after_segment_three_resumes_at_four(engine, store, preset, tmp_path):
    document = write_document(engine, tmp_path / "doc.txt", paragraphs=6, seed=1)

    first = run(
        LongDocumentRunner(engine, store, preset, seed=0),
        document,
        mode="segments",
        cancel_on=lambda e: isinstance(e, SegmentFinished) and e.index == 2,
    )
    started, stopped = first[0], first[-1]
    assert stopped.cancelled and stopped.next_segment == 3
    assert stopped.answer == "" and stopped.answer_message_id is None
    document_id, conversation_id = started.document_id, started.conversation_id
    assert store.get_document(document_id).status == "interrupted"
    saved = store.document_segments(document_id)
    assert len(saved) == 3

    # Resumed without naming the conversation, as the CLI does; stopped in the answer.
    spy = SpyEngine(engine)
    second = run(
        LongDocumentRunner(spy, store, preset, seed=0),
        document,
        mode="segments",
        cancel_on=lambda e: isinstance(e, AnswerChunk),
    )
    assert second[0].resumed_from == 3
    assert (second[0].document_id, second[0].conversation_id) == (
        document_id,
        conversation_id,
    )
    assert [e.index for e in of_type(second, SegmentStarted)] == [3, 4, 5]
    # Segment 4 starts from the notes stored after segment 3.
    first_prompt = next(
        m[-1]["content"] for m in spy.rendered if "Part 4 of 6" in m[-1]["content"]
    )
    assert f"Notes so far:\n{saved[2].notes.strip()}\n\nPart 4 of 6" in first_prompt
    assert second[-1].cancelled and second[-1].next_segment == 6
    assert store.get_document(document_id).status == "complete"

    # All notes are stored but the answer was cut off: only the answer is left.
    third = run(
        LongDocumentRunner(engine, store, preset, seed=0),
        document,
        mode="segments",
        conversation_id=conversation_id,
    )
    assert third[0].resumed_from == 6
    assert of_type(third, SegmentStarted) == []
    assert not third[-1].cancelled and third[-1].answer
    assert [s.segment_index for s in store.document_segments(document_id)] == list(
        range(6)
    )
    assert [(m.role, m.state) for m in store.messages(conversation_id)] == [
        ("user", "complete"),  # recorded once, not again on each resume
        ("assistant", "interrupted"),
        ("assistant", "complete"),
    ]

    # Answered: the same file and question again is a new reading.
    fourth = run(
        LongDocumentRunner(engine, store, preset, seed=0),
        document,
        mode="segments",
        conversation_id=conversation_id,
        cancel_on=lambda e: isinstance(e, RunStarted),
    )
    assert fourth[0].resumed_from == 0 and fourth[0].document_id != document_id


def test_a_segment_cancelled_midway_keeps_no_notes_and_questions_must_match(
    engine, store, preset, tmp_path
):
    document = write_document(engine, tmp_path / "doc.txt", paragraphs=3, seed=2)
    first = run(
        LongDocumentRunner(engine, store, preset, seed=0),
        document,
        mode="segments",
        cancel_on=lambda e: isinstance(e, SegmentStarted) and e.index == 1,
    )
    assert [type(e) for e in first if not isinstance(e, ReadingProgress)] == [
        RunStarted,
        SegmentStarted,
        SegmentFinished,
        SegmentStarted,
        RunFinished,
    ]
    assert first[-1].next_segment == 1
    assert len(store.document_segments(first[0].document_id)) == 1

    def resumed_from(question):
        events = run(
            LongDocumentRunner(engine, store, preset, seed=0),
            document,
            question,
            mode="segments",
            cancel_on=lambda e: isinstance(e, RunStarted),
        )
        return events[0].resumed_from, events[0].document_id

    assert resumed_from(QUESTION) == (1, first[0].document_id)
    # Notes written for another question are not reused.
    other = resumed_from("Who is the main character?")
    assert other[0] == 0 and other[1] != first[0].document_id


def test_auto_reads_short_documents_whole_and_long_ones_in_segments(
    engine, store, preset, tmp_path, tiny_model_dir
):
    small = preset.with_changes(max_context=2048)
    runner = LongDocumentRunner(engine, store, small, seed=0)
    short = write_document(engine, tmp_path / "short.txt", paragraphs=1)
    long = write_document(engine, tmp_path / "long.txt", paragraphs=12)

    whole = runner.plan(short, QUESTION)
    assert whole.mode == "whole" and len(whole.segments) == 1
    assert f"({whole.needs.document_tokens:,} tokens)" in whole.choice.reason
    assert "max_context of 2,048" in whole.choice.reason

    segments = runner.plan(long, QUESTION)
    assert segments.mode == "segments" and len(segments.segments) == 12
    assert f"needs {segments.needs.whole_tokens:,} tokens" in segments.choice.reason
    assert "more than the preset's max_context of 2,048" in segments.choice.reason

    # Memory decides too: past half the safe context, even under max_context.
    sizing = runner.sizing
    tight = KVSizing(
        sizing.geometry,
        sizing.bits,
        sizing.group,
        sizing.act_dtype_bytes,
        max_safe_context=2 * whole.needs.whole_tokens - 2,
    )
    plan = LongDocumentRunner(engine, store, preset, sizing=tight).plan(short, QUESTION)
    assert plan.mode == "segments"
    limit = f"{2 * whole.needs.whole_tokens - 2:,}"
    assert f"more than 50% of the safe limit of {limit} tokens" in plan.choice.reason

    events = run(runner, short)
    started, finished = events[0], events[-1]
    assert started.mode == "whole" and of_type(events, SegmentStarted) == []
    assert finished.answer and finished.next_segment == 1
    assert 0 < finished.max_kv_bytes <= started.kv_bytes_limit
    assert store.get_document(started.document_id).status == "complete"
    assert store.get_document(started.document_id).segments_total == 1
