"""What a long-document run reports, in order, as frozen dataclasses.

A run takes minutes; the CLI prints a line per segment and the app shows a progress
bar, both from these events. They hold plain values only, so they cross threads (the
runner's thread to a Qt worker to the UI) safely and serialize to JSON as they are.

Order: `RunStarted`, then per segment `SegmentStarted`, `ReadingProgress` (after every
prefill chunk and every few tokens of notes) and `SegmentFinished`, then
`ReadingProgress` and `AnswerChunk`s for the answer, then `RunFinished` (also after a
cancel).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunStarted:
    """The plan of a run, before any model work.

    Attributes:
        mode: ``whole`` or ``segments``.
        mode_reason: Why, with the numbers.
        document_tokens: Tokens of the document's text.
        segments: Segments the document was cut into (1 when read whole).
        resumed_from: Index of the first segment this run reads (0 when fresh;
            ``segments`` when only the answer was left).
        conversation_id: The conversation the run is recorded in.
        document_id: The stored document.
        prefix_tokens: Tokens (system prompt and question) kept in the KV cache from
            one step to the next.
        context_tokens: Most tokens of context any step of the run holds.
        kv_bytes_limit: KV bytes at ``context_tokens`` (256-token steps included).
        estimate_s: Predicted wall time of the whole run (the parts left to read
            when resumed) from this machine's measured speed.
        plan_line: The plan in one line, as shown before the run.
    """

    mode: str
    mode_reason: str
    document_tokens: int
    segments: int
    resumed_from: int
    conversation_id: int
    document_id: int
    prefix_tokens: int
    context_tokens: int
    kv_bytes_limit: int
    estimate_s: float = 0.0
    plan_line: str = ""


@dataclass(frozen=True)
class ReadingProgress:
    """Where a run is, for a progress bar: emitted often, cheap to show.

    Attributes:
        phase: ``reading`` (a segment's prefill), ``notes`` (writing its notes) or
            ``answering``.
        index: 0-based segment index (``segments`` while answering).
        segments: Number of segments.
        tokens_read: Document tokens read so far, the current segment's prefill
            included (resumed segments count as read).
        document_tokens: Tokens of the document.
        tokens_per_s: Prefill speed of the current step while reading, decode speed
            while writing.
        eta_s: Predicted seconds left for the whole run, re-estimated from the speed
            measured so far in this run.
        elapsed_s: Seconds since the run started.
    """

    phase: str
    index: int
    segments: int
    tokens_read: int
    document_tokens: int
    tokens_per_s: float
    eta_s: float
    elapsed_s: float

    @property
    def fraction(self) -> float:
        """Share of the document read, 0 to 1."""
        if self.document_tokens <= 0:
            return 0.0
        return min(1.0, self.tokens_read / self.document_tokens)


@dataclass(frozen=True)
class SegmentStarted:
    """A segment's notes are being written.

    Attributes:
        index: 0-based segment index.
        segments: Number of segments.
        tokens: Tokens of the segment's text.
    """

    index: int
    segments: int
    tokens: int


@dataclass(frozen=True)
class SegmentFinished:
    """A segment's notes were written and saved.

    Attributes:
        index: 0-based segment index.
        segments: Number of segments.
        tokens: Tokens of the segment's text.
        prompt_tokens: Tokens of the step's prompt (prefix, notes, segment).
        notes_tokens: Tokens of the notes written (what the next segment carries).
        tokens_per_s: Decode speed while writing the notes.
        seconds: Wall time of the step (prefill and notes).
        kv_bytes: KV cache bytes at the end of the step, its largest point.
        context_tokens: Tokens the KV cache held at the end of the step.
        peak_memory_bytes: MLX peak memory during the step (weights included).
        notes: The notes after this segment (they cover every segment read so far).
        prefill_s: Seconds spent reading the step's prompt.
        prefill_tokens: Prompt tokens computed (the cached prefix excluded).
    """

    index: int
    segments: int
    tokens: int
    prompt_tokens: int
    notes_tokens: int
    tokens_per_s: float
    seconds: float
    kv_bytes: int
    context_tokens: int
    peak_memory_bytes: int
    notes: str = ""
    prefill_s: float = 0.0
    prefill_tokens: int = 0


@dataclass(frozen=True)
class AnswerChunk:
    """A piece of the streamed answer.

    Attributes:
        text: The new text.
    """

    text: str


@dataclass(frozen=True)
class RunFinished:
    """The end of a run: answered, or stopped by a cancel.

    Attributes:
        answer: The answer (partial when cancelled during it, empty when cancelled
            before it).
        cancelled: True when the run was stopped; ``next_segment`` says where a new
            run resumes.
        mode: ``whole`` or ``segments``.
        mode_reason: Why, with the numbers.
        document_tokens: Tokens of the document's text.
        segments: Number of segments.
        resumed_from: Index of the first segment this run read.
        next_segment: Segments with saved notes (``segments`` when all were read).
        conversation_id: The conversation.
        document_id: The stored document.
        answer_message_id: The stored answer, or None when cancelled before it.
        seconds: Wall time of the run.
        max_kv_bytes: Largest KV cache of any step of this run.
        peak_memory_bytes: Largest MLX peak memory of any step of this run.
        sources: For each point of the answer, the segments (1-based) it came from,
            as ``(point, (segment, ...))``; empty when there is no answer.
    """

    answer: str
    cancelled: bool
    mode: str
    mode_reason: str
    document_tokens: int
    segments: int
    resumed_from: int
    next_segment: int
    conversation_id: int
    document_id: int
    answer_message_id: int | None
    seconds: float
    max_kv_bytes: int
    peak_memory_bytes: int
    sources: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def resumable(self) -> bool:
        """Stopped with segments left to read: a new run continues at the next one."""
        return (
            self.cancelled
            and self.mode == "segments"
            and (self.next_segment < self.segments)
        )

    @property
    def stopped_whole(self) -> bool:
        """A whole read that was stopped: nothing was kept, segments would keep notes."""
        return self.cancelled and self.mode == "whole" and self.next_segment == 0
