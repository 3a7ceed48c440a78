"""Read a long document with a KV cache bounded by one segment, and answer a question.

A 60K-token document must not need 60K tokens of KV cache. `LongDocumentRunner` cuts
the document into segments (`segmenter`) and, for each one, asks the model to rewrite
the running notes given the notes so far and the segment. Only the system prompt and
the question stay cached between steps (the engine's ``side_generate`` trims its cache
back to the prefix the prompt shared), so the cache never holds more than

    prefix + notes so far + one segment + the new notes

whatever the document's length. The notes after the last segment cover the whole
document; the answer is streamed from them. A short document is read whole when that
is comfortable (`mode`).

Every segment's notes are saved in their own transaction as they are written, so a
killed or cancelled run resumes at the next segment (`resume`). The run is recorded in
the conversation as a user message naming the document and the question, and the
answer as the assistant's reply, so the app shows it like any other turn.

No MLX here: the engine is used through its thread-safe API (``render``,
``count_tokens``, ``prefill``, ``side_generate``, ``drop_cache``, ``model_info``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace

from app.core.budget import BudgetSettings
from app.core.cancel import CancelToken
from app.core.chat.turn_report import conversation_cache_key, reply_stats
from app.core.engine.events import GenerationEvent
from app.core.errors import InputError
from app.core.longdoc.events import (
    AnswerChunk,
    RunFinished,
    RunStarted,
    SegmentFinished,
    SegmentStarted,
)
from app.core.longdoc.mode import ContextNeeds, ModeChoice, choose_mode
from app.core.longdoc.prompts import (
    DEFAULT_QUESTION,
    answer_messages,
    request_text,
    segment_messages,
    whole_messages,
)
from app.core.longdoc.reader import DocumentText
from app.core.longdoc.resume import Resumable, find_resumable, find_resumable_anywhere
from app.core.longdoc.segmenter import (
    Segment,
    SegmentSpan,
    stream_segments,
    truncate_to_tokens,
)
from app.core.longdoc.sizing import KVSizing, kv_sizing
from app.core.presets import Preset
from app.core.store import ReplySaver, Store

JOIN_SLACK = 8
"""Tokens allowed for BPE merges where notes and segment are pasted into a prompt
measured without them: the bounds below are checked against every real prompt."""

Event = RunStarted | SegmentStarted | SegmentFinished | AnswerChunk | RunFinished


@dataclass(frozen=True)
class RunPlan:
    """How a document will be read, decided before any generation.

    Attributes:
        question: The question asked (the default one when none was given).
        segments: Where the document's segments lie (the whole text as one when
            read whole); their text is streamed from the document when read.
        needs: Context each way of reading needs.
        choice: The mode and why.
        kv_bytes_limit: KV bytes at the most context any step holds.
        stored_segment_tokens: Tokens per segment recorded with the document: the
            preset's, or the whole document's when it is read whole.
    """

    question: str
    segments: tuple[SegmentSpan, ...]
    needs: ContextNeeds
    choice: ModeChoice
    kv_bytes_limit: int
    stored_segment_tokens: int

    @property
    def mode(self) -> str:
        """``whole`` or ``segments``."""
        return self.choice.mode


class LongDocumentRunner:
    """Reads documents into a conversation with the engine and the store.

    Args:
        engine: A loaded `Engine` (or anything with the same API).
        store: The open store.
        preset: Settings of the run: KV precision, ``segment_tokens``,
            ``summary_max_tokens`` (notes per segment), ``max_tokens`` (answer),
            ``max_context``, ``segmenting``, sampling and system prompt.
        sizing: KV arithmetic of the loaded model at the preset's precision; computed
            from ``engine.model_info`` when omitted.
        budget_settings: Memory budget settings used when ``sizing`` is computed.
        seed: Sampling seed.
        clock: Monotonic seconds, for the step timings.
    """

    def __init__(
        self,
        engine,
        store: Store,
        preset: Preset,
        *,
        sizing: KVSizing | None = None,
        budget_settings: BudgetSettings | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
        cancel: CancelToken | None = None,
    ):
        self.engine = engine
        self.store = store
        self.preset = preset
        self.seed = seed
        self._sizing = sizing
        self._budget_settings = budget_settings
        self._clock = clock
        # The engine polls the same token after every token and between prefill
        # chunks, so a cancel needs no handle (and no lock: it runs in signal handlers).
        self._cancel = cancel if cancel is not None else CancelToken()

    # -- cancelling ------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the run after the current token; safe from any thread or signal handler.

        No further segment starts; the segment being read keeps no notes. A runner
        stays cancelled: use a new one for the next run.
        """
        self._cancel.cancel()

    @property
    def cancelled(self) -> bool:
        """True once `cancel` was called."""
        return self._cancel.cancelled

    # -- planning --------------------------------------------------------------------

    @property
    def sizing(self) -> KVSizing:
        """KV arithmetic of the loaded model at the preset's precision."""
        if self._sizing is None:
            info = self.engine.model_info
            self._sizing = kv_sizing(
                info.folder,
                info.weights_bytes,
                info.activation_dtype,
                self.preset.kv_bits,
                self.preset.kv_group,
                settings=self._budget_settings,
            )
        return self._sizing

    def plan(
        self, document: DocumentText, question: str | None = None, mode: str = "auto"
    ) -> RunPlan:
        """Cut the document and decide how to read it; nothing is generated or stored.

        Args:
            document: The document.
            question: What to answer; a summary is asked for when None or blank.
            mode: ``auto``, ``whole`` or ``segments``.

        Raises:
            ValueError: An unknown mode.
            BudgetError: The chosen way does not fit in memory (with the numbers).
            InputError: The document has no text for the tokenizer.
        """
        question = (question or "").strip() or DEFAULT_QUESTION
        preset, count = self.preset, self.engine.count_tokens
        # One streaming pass: only the segments' places are kept, never the text.
        segments = [
            s.span
            for s in stream_segments(document.chunks(), preset.segment_tokens, count)
        ]
        if not segments:
            raise InputError(f"{document.name} contains no text.")
        system = preset.system_prompt
        total = len(segments)
        # The prompts measured empty: notes, segment and document are added to them.
        step = len(
            self.engine.render(segment_messages(system, question, "", "", total, total))
        )
        answer = len(self.engine.render(answer_messages(system, question, "", total)))
        whole = len(self.engine.render(whole_messages(system, question, "")))
        notes = preset.summary_max_tokens
        # Segments' tokens, without the whitespace between them and BPE merges across.
        document_tokens = sum(s.tokens for s in segments)
        slack = JOIN_SLACK * len(segments)
        safe = self.sizing.max_safe_context
        whole_text = None
        if document_tokens <= preset.max_context + slack or (
            mode == "whole" and (safe is None or document_tokens <= safe + slack)
        ):
            # It may be read whole: count it exactly. Such a document is no longer
            # than a context it fits in, so holding its text is bounded too.
            whole_text = document.read_text()
            document_tokens = count(whole_text)
        longest = max(s.tokens for s in segments)
        needs = ContextNeeds(
            document_tokens=document_tokens,
            whole_tokens=whole + JOIN_SLACK + document_tokens + preset.max_tokens,
            segment_tokens=longest,
            segments=total,
            segment_context=max(
                step + JOIN_SLACK + notes + longest + notes,
                answer + JOIN_SLACK + notes + preset.max_tokens,
            ),
        )
        sizing = self.sizing
        choice = choose_mode(
            mode,
            needs,
            max_safe_context=sizing.max_safe_context,
            max_context=preset.max_context,
            segmenting=preset.segmenting,
            kv_bits=preset.kv_bits,
            kv_bytes=sizing.kv_bytes,
        )
        stored_segment_tokens = preset.segment_tokens
        if choice.mode == "whole":
            length = len(whole_text if whole_text is not None else document.read_text())
            segments = [SegmentSpan(0, 0, length, document_tokens)]
            stored_segment_tokens = document_tokens
        return RunPlan(
            question=question,
            segments=tuple(segments),
            needs=needs,
            choice=choice,
            kv_bytes_limit=sizing.kv_bytes(choice.context_tokens),
            stored_segment_tokens=stored_segment_tokens,
        )

    # -- running ---------------------------------------------------------------------

    def run(
        self,
        document: DocumentText,
        question: str | None = None,
        *,
        conversation_id: int | None = None,
        mode: str = "auto",
    ) -> Iterator[Event]:
        """Read the document and answer; yields progress events in order.

        Args:
            document: The document (from `reader.read_document`).
            question: What to answer; a summary is asked for when None or blank.
            conversation_id: The conversation to record the run in. When None, an
                unfinished reading of the same file and question in a recent
                conversation is resumed, else a new conversation is created.
            mode: ``auto``, ``whole`` or ``segments``.

        Yields:
            `RunStarted`, `SegmentStarted`/`SegmentFinished` per segment read,
            `AnswerChunk`s, then `RunFinished`.

        Raises:
            ValueError: An unknown mode.
            BudgetError: The chosen way does not fit in memory.
            InputError: The document has no text.
            KnownError: From the engine or the store; the document is marked
                ``error`` with the reason.
        """
        started = self._clock()
        plan = self.plan(document, question, mode)
        resumable = self._resumable(document, plan, conversation_id)
        if resumable is None:
            conversation_id, document_id = self._record_new(
                document, plan, conversation_id
            )
            resumed_from, notes = 0, ""
        else:
            conversation_id = resumable.document.conversation_id
            document_id = resumable.document.id
            resumed_from = resumable.next_segment
            notes = resumable.saved[-1].notes if resumable.saved else ""
            if resumable.document.status != "complete":
                self.store.set_document_status(document_id, "reading")
        key = conversation_cache_key(conversation_id)
        total = len(plan.segments)
        steps: list[SegmentFinished | GenerationEvent] = []
        next_segment = resumed_from
        answer, message_id = "", None
        # What the stored reading becomes if the run ends here: a kill signal or a
        # consumer that stops iterating leaves it resumable.
        status = "interrupted"
        try:
            yield RunStarted(
                mode=plan.mode,
                mode_reason=plan.choice.reason,
                document_tokens=plan.needs.document_tokens,
                segments=total,
                resumed_from=resumed_from,
                conversation_id=conversation_id,
                document_id=document_id,
                prefix_tokens=self._cache_prefix(key, plan),
                context_tokens=plan.choice.context_tokens,
                kv_bytes_limit=plan.kv_bytes_limit,
            )
            if plan.mode == "segments":
                for segment in self._segments(document, plan, resumed_from):
                    if self.cancelled:
                        break
                    yield SegmentStarted(segment.index, total, segment.tokens)
                    step = self._read_segment(key, plan, segment, notes)
                    if step is None:  # cancelled mid-segment: its notes are not kept
                        break
                    notes, report = step
                    self.store.save_segment(
                        document_id,
                        segment.index,
                        segment.tokens,
                        notes,
                        tokens_per_s=report.tokens_per_s,
                        peak_memory_bytes=report.peak_memory_bytes,
                        kv_bytes=report.kv_bytes,
                    )
                    next_segment = segment.index + 1
                    steps.append(report)
                    yield report
            if not self.cancelled:
                messages = self._answer_messages(plan, document, notes)
                answer, message_id, final = yield from self._answer(
                    key, plan, messages, conversation_id
                )
                steps.append(final)
                if plan.mode == "whole" and final.finish_reason != "cancelled":
                    next_segment = total
            # save_segment completed a segmented reading with its last notes.
            status = "interrupted" if next_segment < total else "complete"
        except Exception as exc:
            status = None
            self.store.set_document_status(document_id, "error", str(exc))
            raise
        finally:
            if status is not None:
                self.store.set_document_status(document_id, status)
            self.engine.drop_cache(key)  # it holds the largest step's KV: free it
        yield RunFinished(
            answer=answer,
            cancelled=self.cancelled,
            mode=plan.mode,
            mode_reason=plan.choice.reason,
            document_tokens=plan.needs.document_tokens,
            segments=total,
            resumed_from=resumed_from,
            next_segment=next_segment,
            conversation_id=conversation_id,
            document_id=document_id,
            answer_message_id=message_id,
            seconds=self._clock() - started,
            max_kv_bytes=max((s.kv_bytes for s in steps), default=0),
            peak_memory_bytes=max((s.peak_memory_bytes for s in steps), default=0),
        )

    # -- steps -----------------------------------------------------------------------

    def _segments(
        self, document: DocumentText, plan: RunPlan, first: int
    ) -> Iterator[Segment]:
        """Stream the planned segments from ``first`` on, with their text.

        Raises:
            InputError: The document no longer cuts as planned (it changed).
        """
        stream = stream_segments(
            document.chunks(), self.preset.segment_tokens, self.engine.count_tokens
        )
        for segment in stream:
            planned = plan.segments[segment.index : segment.index + 1]
            if planned != (segment.span,):
                raise InputError(
                    f"{document.name} changed while it was being read; start the "
                    "reading again."
                )
            if segment.index >= first:
                yield segment

    def _resumable(
        self, document: DocumentText, plan: RunPlan, conversation_id: int | None
    ) -> Resumable | None:
        args = (
            document.sha256,
            plan.stored_segment_tokens,
            list(plan.segments),
            plan.question,
        )
        if conversation_id is None:
            return find_resumable_anywhere(self.store, *args)
        return find_resumable(self.store, conversation_id, *args)

    def _record_new(
        self, document: DocumentText, plan: RunPlan, conversation_id: int | None
    ) -> tuple[int, int]:
        """Store the document and the user's request; return (conversation, document)."""
        if conversation_id is None:
            conversation_id = self.store.create_conversation(
                model=self.engine.model_info.folder,
                preset=self.preset.name,
                settings=self.preset.to_dict(),
                system_prompt=self.preset.system_prompt,
            )
        document_id = self.store.add_document(
            conversation_id,
            document.name,
            document.size_bytes,
            document.sha256,
            plan.stored_segment_tokens,
            len(plan.segments),
        )
        request = request_text(document.name, plan.question)
        self.store.add_message(
            conversation_id,
            "user",
            request,
            token_count=self.engine.count_tokens(request),
        )
        self.store.auto_title(conversation_id)
        return conversation_id, document_id

    def _cache_prefix(self, key: str, plan: RunPlan) -> int:
        """Fill the cache with the tokens every step's prompt starts with; return them.

        ``side_generate`` trims the cache back to what its prompt shared with it, so
        this prefix is all that survives from one step to the next.
        """
        system, question = self.preset.system_prompt, plan.question
        # Two step prompts that differ only in their notes.
        probes = [
            self.engine.render(segment_messages(system, question, notes, "", 0, 1))
            for notes in ("a", "b")
        ]
        prefix = os.path.commonprefix(probes)
        self.engine.prefill(key, prefix, self.preset.kv_settings())
        return len(prefix)

    def _read_segment(
        self, key: str, plan: RunPlan, segment: Segment, notes: str
    ) -> tuple[str, SegmentFinished] | None:
        """Write the notes after one segment; None when cancelled during it."""
        started = self._clock()
        preset = self.preset
        ids = self.engine.render(
            segment_messages(
                preset.system_prompt,
                plan.question,
                notes,
                segment.text,
                segment.index,
                len(plan.segments),
            )
        )
        sampling = replace(
            preset.sampling_settings(self.seed), max_tokens=preset.summary_max_tokens
        )
        parts: list[str] = []
        final = _drain(self._stream(key, plan, ids, sampling), parts)
        if final.finish_reason == "cancelled":
            return None
        # Text can re-tokenize longer than it was generated; the bound is on what the
        # next prompt carries.
        notes = truncate_to_tokens(
            "".join(parts).strip(), preset.summary_max_tokens, self.engine.count_tokens
        )
        report = SegmentFinished(
            index=segment.index,
            segments=len(plan.segments),
            tokens=segment.tokens,
            prompt_tokens=len(ids),
            notes_tokens=self.engine.count_tokens(notes),
            tokens_per_s=final.tokens_per_s,
            seconds=self._clock() - started,
            kv_bytes=final.kv_bytes,
            context_tokens=final.context_tokens,
            peak_memory_bytes=final.peak_memory_bytes,
        )
        return notes, report

    def _stream(
        self, key: str, plan: RunPlan, ids: list[int], sampling
    ) -> Generator[str, None, GenerationEvent]:
        """Run one step on the cache; yield its text pieces, return its final event.

        Raises:
            RuntimeError: The step could pass the context the plan promised (a bug in
                the plan's arithmetic, refused before anything is allocated).
        """
        limit = plan.choice.context_tokens
        if len(ids) + sampling.max_tokens > limit:
            raise RuntimeError(
                f"a step of {len(ids)} prompt + {sampling.max_tokens} new tokens "
                f"would pass the planned context of {limit} tokens"
            )
        handle = self.engine.side_generate(
            key, ids, self.preset.kv_settings(), sampling, cancel=self._cancel
        )
        try:
            for event in handle:
                if isinstance(event, GenerationEvent) and event.text:
                    yield event.text
        finally:
            if handle.final is None:  # the consumer left early: stop the engine too
                handle.cancel()
        return handle.final

    def _answer_messages(
        self, plan: RunPlan, document: DocumentText, notes: str
    ) -> list[dict]:
        system = self.preset.system_prompt
        if plan.mode == "whole":
            return whole_messages(system, plan.question, document.read_text())
        return answer_messages(system, plan.question, notes, len(plan.segments))

    def _answer(
        self, key: str, plan: RunPlan, messages: list[dict], conversation_id: int
    ) -> Generator[AnswerChunk, None, tuple[str, int, GenerationEvent]]:
        """Stream the answer into the conversation as `AnswerChunk`s.

        Returns:
            The answer, its message id and the step's final event.
        """
        ids = self.engine.render(messages)
        message_id = self.store.begin_reply(conversation_id)
        saver = ReplySaver(self.store, message_id)
        stream = self._stream(key, plan, ids, self.preset.sampling_settings(self.seed))
        try:
            final = yield from _forward(stream, saver)
        except Exception as exc:
            saver.fail(exc)
            raise
        except BaseException:  # a kill signal or a consumer that stopped iterating
            saver.finish(stopped=True)
            raise
        stats = reply_stats(final)
        saver.finish(stats, stopped=final.finish_reason == "cancelled")
        return saver.text, message_id, final


def _drain(stream: Generator[str, None, GenerationEvent], parts: list[str]):
    """Drain ``stream`` into ``parts``; return its final event."""
    while True:
        try:
            parts.append(next(stream))
        except StopIteration as stop:
            return stop.value


def _forward(
    stream: Generator[str, None, GenerationEvent], saver: ReplySaver
) -> Generator[AnswerChunk, None, GenerationEvent]:
    """Save and pass on each piece of ``stream``; return its final event."""
    try:
        while True:
            try:
                text = next(stream)
            except StopIteration as stop:
                return stop.value
            saver.add(text)
            yield AnswerChunk(text)
    finally:
        stream.close()  # cancels the engine's step if the consumer left early
