"""Read a long document with a KV cache bounded by one segment, and answer a question.

A 60K-token document must not need 60K tokens of KV cache. `LongDocumentRunner` reads
the segments its `Planner` cut and, for each one, asks the model to rewrite the running
notes given the notes so far and the segment. Only the system prompt and the question
stay cached between steps (`steps`), so the cache never holds more than

    prefix + notes so far + one segment + the new notes

whatever the document's length. The notes after the last segment cover the whole
document; the answer is streamed from them and followed by the segments each of its
points came from (`sources`). A short document is read whole when that is comfortable
in memory and time (`mode`).

Every segment's notes are saved in their own transaction as they are written, so a
killed or cancelled run resumes at the next segment (`resume`); a cancel is noticed
between prefill chunks, within a second. The run is recorded in the conversation as a
user message naming the document and the question, and the answer as the assistant's
reply, so the app shows it like any other turn. Each step's measured speed goes into
the `SpeedRecord`, which the next plan's estimate uses.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import replace
from typing import Literal

from app.core.budget import BudgetSettings
from app.core.cancel import CancelToken
from app.core.chat.turn_report import conversation_cache_key, reply_stats
from app.core.engine.events import GenerationEvent
from app.core.errors import InputError
from app.core.longdoc.events import (
    AnswerChunk,
    ReadingProgress,
    RunFinished,
    RunStarted,
    SegmentFinished,
    SegmentStarted,
)
from app.core.longdoc.known_files import remember_file
from app.core.longdoc.plan.mode import CLI_CONTROLS, Controls
from app.core.longdoc.plan.planning import JOIN_SLACK, Planner, RunPlan
from app.core.longdoc.plan.sizing import KVSizing
from app.core.longdoc.plan.speed import SpeedRecord, remember_step
from app.core.longdoc.progress import ProgressTracker
from app.core.longdoc.prompts import (
    answer_messages,
    segment_messages,
    whole_messages,
)
from app.core.longdoc.reading.reader import DocumentText
from app.core.longdoc.resume import find_resumable_reading, record_reading
from app.core.longdoc.segmenter import Segment, segment_texts, truncate_to_tokens
from app.core.longdoc.sources import find_sources, sources_text
from app.core.longdoc.steps import follow_step, run_step
from app.core.presets.presets import Preset
from app.core.store import ReplySaver, Store

__all__ = ["JOIN_SLACK", "Event", "LongDocumentRunner", "RunPlan"]

Event = (
    RunStarted
    | SegmentStarted
    | ReadingProgress
    | SegmentFinished
    | AnswerChunk
    | RunFinished
)


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
        cancel: The token that stops the run (a new one when None).
        speeds: Where speeds measured on this machine are kept and read for the
            estimates; the app home's file by default, None to measure nothing.
        controls: The names of the controls a refusal advises (see `Controls`).
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
        speeds: SpeedRecord | None | Literal["default"] = "default",
        controls: Controls = CLI_CONTROLS,
    ):
        self.engine = engine
        self.store = store
        self.preset = preset
        self.seed = seed
        self._clock = clock
        self.speeds = SpeedRecord() if isinstance(speeds, str) else speeds
        self.planner = Planner(
            engine,
            preset,
            sizing=sizing,
            budget_settings=budget_settings,
            speeds=self.speeds,
            controls=controls,
        )
        # The engine polls the same token after every token and between prefill
        # chunks, so a cancel needs no handle (and no lock: it runs in signal handlers).
        self._cancel = cancel if cancel is not None else CancelToken()

    # -- cancelling ------------------------------------------------------------------

    def cancel(self) -> None:
        """Stop the run within a second; safe from any thread or signal handler.

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
        return self.planner.sizing

    def plan(
        self, document: DocumentText, question: str | None = None, mode: str = "auto"
    ) -> RunPlan:
        """Cut the document and decide how to read it; nothing is generated or stored.

        See `Planner.plan`; a first-time speed probe stops with the run's cancel.
        """
        return self.planner.plan(document, question, mode, self._cancel)

    # -- running ---------------------------------------------------------------------

    def run(
        self,
        document: DocumentText,
        question: str | None = None,
        *,
        conversation_id: int | None = None,
        mode: str = "auto",
        plan: RunPlan | None = None,
    ) -> Iterator[Event]:
        """Read the document and answer; yields progress events in order.

        Args:
            document: The document (from `reader.read_document`).
            question: What to answer; a summary is asked for when None or blank.
            conversation_id: The conversation to record the run in. When None, an
                unfinished reading of the same file and question in a recent
                conversation is resumed, else a new conversation is created.
            mode: ``auto``, ``whole`` or ``segments`` (ignored with ``plan``).
            plan: A plan of this document made (and shown) before, e.g. by `plan`.

        Yields:
            `RunStarted`, per segment read `SegmentStarted`, `ReadingProgress` and
            `SegmentFinished`, then `ReadingProgress` and `AnswerChunk`s, then
            `RunFinished`.

        Raises:
            ValueError: An unknown mode.
            BudgetError: The chosen way does not fit in memory.
            InputError: The document has no text.
            KnownError: From the engine or the store; the document is marked
                ``error`` with the reason.
        """
        started = self._clock()
        if plan is None:
            plan = self.plan(document, question, mode)
        if document.text is None or document.kind != "text":
            # A file (not a string built in memory): the app's Resume re-reads it.
            remember_file(document.sha256, document.path)
        resumable = find_resumable_reading(self.store, document, plan, conversation_id)
        if resumable is None:
            conversation_id, document_id = record_reading(
                self.store, self.engine, self.preset, document, plan, conversation_id
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
        tracker = ProgressTracker(plan, resumed_from, self._clock)
        steps: list[SegmentFinished | GenerationEvent] = []
        next_segment = resumed_from
        answer, message_id, sources = "", None, ()
        # What the stored reading becomes if the run ends here: a kill signal or a
        # consumer that stops iterating leaves it resumable.
        status: str | None = "interrupted"
        try:
            prefix = self._cache_prefix(key, plan)
            remaining = plan.remaining_seconds(resumed_from)
            yield RunStarted(
                mode=plan.mode,
                mode_reason=plan.choice.reason,
                document_tokens=plan.needs.document_tokens,
                segments=total,
                resumed_from=resumed_from,
                conversation_id=conversation_id,
                document_id=document_id,
                prefix_tokens=prefix,
                context_tokens=plan.choice.context_tokens,
                kv_bytes_limit=plan.kv_bytes_limit,
                estimate_s=remaining or 0.0,
                plan_line=plan.line,
            )
            if plan.mode == "segments":
                for segment in self._segments(document, plan, resumed_from):
                    if self.cancelled:
                        break
                    yield SegmentStarted(segment.index, total, segment.tokens)
                    step = yield from self._read_segment(
                        key, plan, segment, notes, tracker
                    )
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
                answer, message_id, final, sources = yield from self._answer(
                    key, plan, document, notes, conversation_id, tracker
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
            sources=sources,
        )

    # -- steps -----------------------------------------------------------------------

    def _segments(
        self, document: DocumentText, plan: RunPlan, first: int
    ) -> Iterator[Segment]:
        """Stream the planned segments from ``first`` on, with their text.

        Raises:
            InputError: The document changed since it was planned.
        """
        try:
            for segment in segment_texts(document.chunks(), plan.segments):
                if segment.index >= first:
                    yield segment
        except ValueError as exc:
            raise InputError(
                f"{document.name} changed while it was being read ({exc}); start the "
                "reading again."
            ) from exc

    def _cache_prefix(self, key: str, plan: RunPlan) -> int:
        """Fill the cache with the tokens every step's prompt starts with; return them.

        ``side_generate`` trims the cache back to what its prompt shared with it, so
        this prefix is all that survives from one step to the next.
        """
        prefix = list(plan.prompts.prefix)
        self.engine.prefill(key, prefix, self.preset.kv_settings(), cancel=self._cancel)
        return len(prefix)

    def _read_segment(
        self,
        key: str,
        plan: RunPlan,
        segment: Segment,
        notes: str,
        tracker: ProgressTracker,
    ) -> Generator[ReadingProgress, None, tuple[str, SegmentFinished] | None]:
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
        tracker.start_step(segment.index)
        final = yield from follow_step(
            self._step(key, plan, ids, sampling), tracker, parts.append
        )
        tracker.finish_step()
        if final.finish_reason == "cancelled":
            return None
        remember_step(self.speeds, self.planner.speed_key, final)
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
            notes=notes,
            prefill_s=final.prefill_s,
            prefill_tokens=final.new_tokens,
        )
        return notes, report

    def _step(self, key: str, plan: RunPlan, ids: list[int], sampling):
        return run_step(
            self.engine,
            key,
            ids,
            self.preset.kv_settings(),
            sampling,
            limit=plan.choice.context_tokens,
            cancel=self._cancel,
        )

    def _answer(
        self,
        key: str,
        plan: RunPlan,
        document: DocumentText,
        notes: str,
        conversation_id: int,
        tracker: ProgressTracker,
    ) -> Generator[ReadingProgress | AnswerChunk, None, tuple]:
        """Stream the answer into the conversation, then the segments it drew on.

        Returns:
            The answer, its message id, the step's final event and the sources.
        """
        system = self.preset.system_prompt
        if plan.mode == "whole":
            messages = whole_messages(system, plan.question, document.read_text())
            tracker.start_step(0)
        else:
            messages = answer_messages(system, plan.question, notes, len(plan.segments))
            yield tracker.answering()
        ids = self.engine.render(messages)
        message_id = self.store.begin_reply(conversation_id)
        saver = ReplySaver(self.store, message_id)
        chunks: list[str] = []
        sampling = self.preset.sampling_settings(self.seed)
        sources: tuple[tuple[str, tuple[int, ...]], ...] = ()
        try:
            follow = follow_step(
                self._step(key, plan, ids, sampling),
                tracker,
                chunks.append,
                whole=plan.mode == "whole",
            )
            while True:
                try:
                    event = next(follow)
                except StopIteration as stop:
                    final = stop.value
                    break
                for text in chunks:
                    saver.add(text)
                    yield AnswerChunk(text)
                chunks.clear()
                if isinstance(event, ReadingProgress):
                    yield event
            for text in chunks:
                saver.add(text)
                yield AnswerChunk(text)
            stopped = final.finish_reason == "cancelled"
            if not stopped:
                remember_step(self.speeds, self.planner.speed_key, final)
                # A whole read cites the parts the document was cut into when planned.
                sources = find_sources(
                    saver.text,
                    segment_texts(document.chunks(), plan.parts),
                    len(plan.parts),
                    plan.question,
                )
                cited = sources_text(sources)
                if cited:
                    saver.add(cited, tokens=0)
                    yield AnswerChunk(cited)
        except Exception as exc:
            saver.fail(exc)
            raise
        except BaseException:  # a kill signal or a consumer that stopped iterating
            saver.finish(stopped=True)
            raise
        saver.finish(reply_stats(final), stopped=stopped)
        return saver.text, message_id, final, sources
