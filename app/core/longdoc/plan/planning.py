"""The plan of a reading, before any of it: segments, context, KV peak and time.

A user must see what a reading will cost before it starts and may switch between
reading whole and in segments, so the plan is computed once (one streaming pass over
the document: segment spans, token counts) and switching only re-decides from those
numbers (`Planner.with_mode`), without reading the document again. The time estimate
comes from speeds measured on this machine (`speed`), probed on the document's first
tokens the first time a model is used.

No MLX here: the engine is used through its thread-safe API (``render``,
``count_tokens``, ``tokenizer``, ``prefill``, ``side_generate``, ``model_info``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from app.core.budget import BudgetSettings
from app.core.cancel import CancelToken
from app.core.errors import InputError
from app.core.longdoc.plan.mode import (
    CLI_CONTROLS,
    ContextNeeds,
    Controls,
    Limit,
    ModeChoice,
    choose_mode,
)
from app.core.longdoc.plan.plan_words import plan_line
from app.core.longdoc.plan.sizing import KVSizing, kv_sizing
from app.core.longdoc.plan.speed import SpeedModel, SpeedRecord
from app.core.longdoc.plan.speed_probe import probe_speed
from app.core.longdoc.prompts import (
    DEFAULT_QUESTION,
    answer_messages,
    segment_messages,
    whole_messages,
)
from app.core.longdoc.reading.reader import DocumentText
from app.core.longdoc.segmenter import SegmentSpan, segment_texts, stream_segments
from app.core.presets.presets import Preset

MIN_SEGMENT_TOKENS = 256
"""The smallest segment a preset may set; a context with less room refuses instead."""
SEGMENT_STEP = 256
"""Segments cut to fit a context are rounded down to this, for a readable plan."""
MOST_SEGMENTS = 99_999
"""Segments counted into the step prompt when sizing segments before cutting: its
"segment i of N" then takes at least as many tokens as in the real run."""


class PlanCancelled(Exception):
    """The plan's cancel token was set while the document was being cut."""


JOIN_SLACK = 8
"""Tokens allowed for BPE merges where notes and segment are pasted into a prompt
measured without them: the bounds below are checked against every real prompt."""
SWITCHABLE_WHOLE_TOKENS = 131_072
"""Documents up to this long (and inside the safe context) are counted exactly when
planned, so the user can switch to a whole read at once; a longer one is counted when
the switch is made (holding its text costs far less than its KV cache would)."""


@dataclass(frozen=True)
class PromptSizes:
    """Tokens of the run's prompts measured empty, and the cached prefix.

    Attributes:
        prefix: Token ids every step's prompt starts with (system prompt, question):
            they stay cached from one step to the next.
        step: A segment step's prompt with empty notes and segment.
        answer: The answer prompt with empty notes.
        whole: The whole-document prompt with an empty document.
    """

    prefix: tuple[int, ...]
    step: int
    answer: int
    whole: int


@dataclass(frozen=True)
class RunPlan:
    """How a document will be read, decided before any generation.

    Attributes:
        question: The question asked (the default one when none was given).
        parts: Where the document's segments lie; kept when it is read whole too,
            to say which part of the text the answer's points come from.
        whole_chars: Characters of the document's text.
        needs: Context each way of reading needs.
        choice: The mode and why.
        kv_bytes_limit: KV bytes at the most context any step holds.
        kv_bits: KV precision of the reading.
        preset_segment_tokens: Tokens per segment the document was cut at.
        prompts: The prompts' fixed sizes.
        notes_tokens: Longest notes per segment.
        answer_tokens: Longest answer.
        speed: Speeds measured on this machine, or None when nothing is known.
        estimates: Predicted seconds per mode (None without a measured speed).
        exact_count: ``needs.document_tokens`` counts the whole text at once (else
            it adds up the segments', a few tokens per join short).
        segment_note: Why segments are smaller than the preset's, or "".
    """

    question: str
    parts: tuple[SegmentSpan, ...]
    whole_chars: int
    needs: ContextNeeds
    choice: ModeChoice
    kv_bytes_limit: int
    kv_bits: int
    preset_segment_tokens: int
    prompts: PromptSizes
    notes_tokens: int
    answer_tokens: int
    speed: SpeedModel | None
    estimates: dict[str, float | None]
    exact_count: bool = True
    segment_note: str = ""

    @property
    def mode(self) -> str:
        """``whole`` or ``segments``."""
        return self.choice.mode

    @property
    def segments(self) -> tuple[SegmentSpan, ...]:
        """The segments read: the parts, or the whole text as one."""
        if self.mode == "segments":
            return self.parts
        return (SegmentSpan(0, 0, self.whole_chars, self.needs.document_tokens),)

    @property
    def stored_segment_tokens(self) -> int:
        """Tokens per segment recorded with the document (what resuming compares)."""
        if self.mode == "segments":
            return self.preset_segment_tokens
        return self.needs.document_tokens

    @property
    def estimate_s(self) -> float | None:
        """Predicted seconds of the chosen way."""
        return self.estimates.get(self.mode)

    @property
    def line(self) -> str:
        """The plan in one line."""
        return plan_line(
            self.mode,
            document_tokens=self.needs.document_tokens,
            segments=len(self.segments),
            segment_tokens=self.needs.segment_tokens,
            kv_bytes_limit=self.kv_bytes_limit,
            kv_bits=self.kv_bits,
            estimate_s=self.estimate_s,
        )

    def remaining_seconds(self, first_segment: int) -> float | None:
        """Predicted seconds of the chosen way from segment ``first_segment`` on."""
        if self.speed is None:
            return None
        return estimate_seconds(self, self.mode, first_segment)


def estimate_seconds(plan: RunPlan, mode: str, first_segment: int = 0) -> float:
    """Predict a reading's wall time from the measured speed (``plan.speed`` set).

    Every step's prompt starts after the cached prefix; notes and answers are taken
    at their longest (a model that stops early finishes sooner).
    """
    speed = plan.speed
    assert speed is not None, "called only for plans with a measured speed"
    prefix = len(plan.prompts.prefix)
    notes, answer = plan.notes_tokens, plan.answer_tokens
    if mode == "whole":
        end = plan.prompts.whole + JOIN_SLACK + plan.needs.document_tokens
        return speed.prefill_seconds(prefix, end) + speed.decode_seconds(end, answer)
    seconds = 0.0
    for span in plan.parts[first_segment:]:
        carried = notes if span.index else 0
        end = plan.prompts.step + JOIN_SLACK + carried + span.tokens
        seconds += speed.prefill_seconds(prefix, end) + speed.decode_seconds(end, notes)
    end = plan.prompts.answer + JOIN_SLACK + notes
    return (
        seconds + speed.prefill_seconds(prefix, end) + speed.decode_seconds(end, answer)
    )


class Planner:
    """Plans readings for one engine, preset and store of measured speeds.

    Args:
        engine: A loaded `Engine` (or anything with the same API).
        preset: The reading's settings.
        sizing: KV arithmetic of the loaded model at the preset's precision; computed
            from ``engine.model_info`` when omitted.
        budget_settings: Memory budget settings used when ``sizing`` is computed.
        speeds: Where measured speeds are kept; None measures nothing and predicts no
            time (tests of pure mechanics).
        controls: The names of the controls a refusal advises (the command's options
            by default; the app passes its own).
    """

    def __init__(
        self,
        engine,
        preset: Preset,
        *,
        sizing: KVSizing | None = None,
        budget_settings: BudgetSettings | None = None,
        speeds: SpeedRecord | None = None,
        controls: Controls = CLI_CONTROLS,
    ):
        self.engine = engine
        self.preset = preset
        self.speeds = speeds
        self.controls = controls
        self._sizing = sizing
        self._budget_settings = budget_settings

    @property
    def sizing(self) -> KVSizing:
        """KV arithmetic of the loaded model at the preset's precision."""
        if self._sizing is None:
            info = self.engine.model_info
            self._sizing = kv_sizing(
                info.folder,
                info.weights_bytes,
                info.kv_dtype,
                self.preset.kv_bits,
                self.preset.kv_group,
                settings=self._budget_settings,
            )
        return self._sizing

    @property
    def speed_key(self) -> str:
        """Key of the loaded model at this precision in the speed record."""
        return SpeedRecord.key(self.engine.model_info.identity, self.preset.kv_bits)

    def plan(
        self,
        document: DocumentText,
        question: str | None = None,
        mode: str = "auto",
        cancel: CancelToken | None = None,
    ) -> RunPlan:
        """Cut the document and decide how to read it; nothing is stored.

        Args:
            document: The document.
            question: What to answer; a summary is asked for when None or blank.
            mode: ``auto``, ``whole`` or ``segments``.
            cancel: Stops cutting the document (`PlanCancelled`) and a first-time
                speed probe (the plan then has no estimate).

        Raises:
            PlanCancelled: ``cancel`` was set while the document was being cut.
            ValueError: An unknown mode.
            BudgetError: The chosen way does not fit in memory (with the numbers).
            InputError: The document has no text for the tokenizer.
        """
        question = (question or "").strip() or DEFAULT_QUESTION
        preset, count = self.preset, self.engine.count_tokens
        # One streaming pass: only the segments' places are kept, never the text.
        parts, whole_chars = [], 0
        segment_tokens, segment_note = self._segment_tokens(question)
        for segment in stream_segments(document.chunks(), segment_tokens, count):
            if cancel is not None and cancel.cancelled:
                raise PlanCancelled  # a long document takes a while to cut
            parts.append(segment.span)
            whole_chars = segment.end
        if not parts:
            raise InputError(f"{document.name} contains no text.")
        prompts = self._prompt_sizes(question, len(parts))
        notes = preset.summary_max_tokens
        # Segments' tokens, without the whitespace between them and BPE merges across.
        document_tokens = sum(s.tokens for s in parts)
        slack = JOIN_SLACK * len(parts)
        safe = self.sizing.max_safe_context
        fits = safe is None or document_tokens <= safe + slack
        exact = document_tokens <= preset.max_context + slack or (
            fits and (mode == "whole" or document_tokens <= SWITCHABLE_WHOLE_TOKENS)
        )
        if exact:
            # It may be read whole: count it exactly. Such a document is no longer
            # than a context it fits in, so holding its text is bounded too.
            document_tokens = count(document.read_text())
        longest = max(s.tokens for s in parts)
        needs = ContextNeeds(
            document_tokens=document_tokens,
            whole_tokens=prompts.whole
            + JOIN_SLACK
            + document_tokens
            + preset.max_tokens,
            segment_tokens=longest,
            segments=len(parts),
            segment_context=max(
                prompts.step + JOIN_SLACK + notes + longest + notes,
                prompts.answer + JOIN_SLACK + notes + preset.max_tokens,
            ),
        )
        speed = self._speed(document, parts, prompts, cancel)
        draft = RunPlan(
            question=question,
            parts=tuple(parts),
            whole_chars=whole_chars,
            needs=needs,
            choice=ModeChoice("segments", "", needs.segment_context),
            kv_bytes_limit=0,
            kv_bits=preset.kv_bits,
            preset_segment_tokens=segment_tokens,
            prompts=prompts,
            notes_tokens=notes,
            answer_tokens=preset.max_tokens,
            speed=speed,
            estimates={},
            exact_count=exact,
            segment_note=segment_note,
        )
        if speed is not None:
            draft = replace(
                draft,
                estimates={
                    m: estimate_seconds(draft, m) for m in ("whole", "segments")
                },
            )
        return self.with_mode(draft, mode)

    def with_mode(
        self, plan: RunPlan, mode: str, document: DocumentText | None = None
    ) -> RunPlan:
        """The same plan decided again for ``mode`` (the user's switch).

        Args:
            plan: A plan of ``document``.
            mode: ``auto``, ``whole`` or ``segments``.
            document: The document, needed to count it exactly when switching a long
                one to a whole read.

        Raises:
            ValueError: An unknown mode, or a whole read of a long document switched
                to without it.
            BudgetError: That way does not fit in memory.
        """
        safe = self.sizing.max_safe_context
        # A lower bound (the segments' tokens) past the limit refuses without counting.
        beyond = safe is not None and plan.needs.whole_tokens > safe
        if mode == "whole" and not plan.exact_count and not beyond:
            if document is None:
                raise ValueError("counting a whole read needs the document")
            tokens = self.engine.count_tokens(document.read_text())
            needs = replace(
                plan.needs,
                document_tokens=tokens,
                whole_tokens=plan.prompts.whole
                + JOIN_SLACK
                + tokens
                + plan.answer_tokens,
            )
            plan = replace(plan, needs=needs, exact_count=True)
            if plan.speed is not None:
                estimates = dict(plan.estimates, whole=estimate_seconds(plan, "whole"))
                plan = replace(plan, estimates=estimates)
        sizing = self.sizing
        choice = choose_mode(
            mode,
            plan.needs,
            max_safe_context=sizing.max_safe_context,
            max_context=self.preset.max_context,
            segmenting=self.preset.segmenting,
            kv_bits=self.preset.kv_bits,
            kv_bytes=sizing.kv_bytes,
            whole_seconds=plan.estimates.get("whole"),
            limit=Limit(
                sizing.max_safe_context, sizing.limit_name, sizing.limited_by_memory
            ),
            controls=self.controls,
        )
        if choice.mode == "segments" and plan.segment_note:
            choice = replace(choice, reason=f"{choice.reason} {plan.segment_note}")
        return replace(
            plan, choice=choice, kv_bytes_limit=sizing.kv_bytes(choice.context_tokens)
        )

    def _segment_tokens(self, question: str) -> tuple[int, str]:
        """Tokens per segment: the preset's, or fewer where the safe context is smaller.

        A segment's step holds its prompt, the notes so far, the segment and the new
        notes; the segment gets what the safe context (the model's trained context or
        this machine's memory, whichever is smaller) leaves of that.

        Returns:
            The tokens, and why they are fewer than the preset's ("" when they are not).
        """
        wanted = self.preset.segment_tokens
        sizing = self.sizing
        safe = sizing.max_safe_context
        if safe is None:
            return wanted, ""
        step = self._prompt_sizes(question, MOST_SEGMENTS).step
        room = safe - step - JOIN_SLACK - 2 * self.preset.summary_max_tokens
        fitted = max(MIN_SEGMENT_TOKENS, room // SEGMENT_STEP * SEGMENT_STEP)
        if fitted >= wanted:
            return wanted, ""
        return fitted, (
            f"Segments hold {fitted:,} tokens, not the preset's {wanted:,}, to stay "
            f"inside {sizing.limit_name}."
        )

    def _prompt_sizes(self, question: str, total: int) -> PromptSizes:
        system, render = self.preset.system_prompt, self.engine.render
        # Two step prompts that differ only in their notes share the cached prefix.
        probes = [
            render(segment_messages(system, question, notes, "", 0, 1))
            for notes in ("a", "b")
        ]
        return PromptSizes(
            prefix=tuple(os.path.commonprefix(probes)),
            step=len(render(segment_messages(system, question, "", "", total, total))),
            answer=len(render(answer_messages(system, question, "", total))),
            whole=len(render(whole_messages(system, question, ""))),
        )

    def _speed(
        self,
        document: DocumentText,
        parts: list[SegmentSpan],
        prompts: PromptSizes,
        cancel: CancelToken | None,
    ) -> SpeedModel | None:
        """The measured speed, probed on the document's start the first time."""
        if self.speeds is None:
            return None
        key = self.speed_key
        speed = self.speeds.model(key)
        if speed is not None:
            return speed
        first = next(segment_texts(document.chunks(), parts[:1]))
        ids = list(prompts.prefix) + self.engine.tokenizer.encode(first.text)
        prefill, decode = probe_speed(
            self.engine, self.preset.kv_settings(), ids, cancel
        )
        if prefill:
            self.speeds.add(key, prefill, decode)
        return self.speeds.model(key)
