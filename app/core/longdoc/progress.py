"""Where a reading is and how long it has left, as `ReadingProgress` events.

The runner tells the tracker when a step starts, how far the step's prefill got and
how many notes tokens were written; the tracker turns that into tokens read, the
current speed and an ETA. The ETA is the plan's prediction for what is left (from the
speeds measured on this machine), scaled by how this run's finished work compared
with its own prediction, so a machine busier than when it was measured still gets an
honest figure; without a prediction it extrapolates the run's own speed.
"""

from __future__ import annotations

from collections.abc import Callable

from app.core.longdoc.events import ReadingProgress
from app.core.longdoc.plan.planning import JOIN_SLACK, RunPlan


class ProgressTracker:
    """Progress of one run.

    Args:
        plan: The run's plan.
        resumed_from: First segment this run reads.
        clock: Monotonic seconds.
    """

    def __init__(self, plan: RunPlan, resumed_from: int, clock: Callable[[], float]):
        self._plan = plan
        self._clock = clock
        self._started = clock()
        self._segments = plan.segments
        self._before = [0]
        for span in self._segments:
            self._before.append(self._before[-1] + span.tokens)
        self._resumed_tokens = self._before[min(resumed_from, len(self._segments))]
        self._first = resumed_from
        self._index = resumed_from
        self._phase = "reading"
        self._step_started = self._started
        self._step_tokens = 0  # document tokens of the current step read so far
        self._predicted_done = 0.0  # predicted seconds of the finished steps
        self._actual_done = 0.0  # their measured seconds

    @property
    def total_tokens(self) -> int:
        """Tokens of the document."""
        return self._plan.needs.document_tokens

    def start_step(self, index: int, phase: str = "reading") -> None:
        """A segment's step (``index``) or the answer (``len(segments)``) begins."""
        self._index = index
        self._phase = phase
        self._step_started = self._clock()
        self._step_tokens = 0

    def finish_step(self) -> None:
        """The current step ended: its time calibrates the ETA."""
        self._actual_done += self._clock() - self._step_started
        self._predicted_done += self._step_prediction(self._index)

    def prefill(self, processed: int, total: int) -> ReadingProgress:
        """The current step's prompt is read up to ``processed`` of ``total`` tokens."""
        self._phase = "reading" if self._index < len(self._segments) else "answering"
        elapsed = self._clock() - self._step_started
        if self._index < len(self._segments) and total > 0:
            tokens = self._segments[self._index].tokens
            self._step_tokens = min(tokens, tokens * processed // total)
        speed = processed / elapsed if elapsed > 0 else 0.0
        return self._event(speed, processed / total if total else 1.0)

    def writing(self, generated: int, tokens_per_s: float) -> ReadingProgress:
        """The current step has generated ``generated`` tokens (notes or answer)."""
        if self._index < len(self._segments):
            self._phase = "notes"
            self._step_tokens = self._segments[self._index].tokens
            share = generated / max(self._plan.notes_tokens, 1)
        else:
            self._phase = "answering"
            share = generated / max(self._plan.answer_tokens, 1)
        return self._event(tokens_per_s, min(1.0, 0.5 + share / 2))

    def answering(self) -> ReadingProgress:
        """The answer step starts (after every segment, or a whole read's decode)."""
        self.start_step(len(self._segments), "answering")
        return self._event(0.0, 0.0)

    # -- figures -------------------------------------------------------------------

    def _tokens_read(self) -> int:
        index = min(self._index, len(self._segments))
        return min(self.total_tokens, self._before[index] + self._step_tokens)

    def _event(self, tokens_per_s: float, step_share: float) -> ReadingProgress:
        now = self._clock()
        return ReadingProgress(
            phase=self._phase,
            index=self._index,
            segments=len(self._segments),
            tokens_read=self._tokens_read(),
            document_tokens=self.total_tokens,
            tokens_per_s=tokens_per_s,
            eta_s=self._eta(step_share, now),
            elapsed_s=now - self._started,
        )

    def _eta(self, step_share: float, now: float) -> float:
        plan = self._plan
        if plan.speed is not None:
            left = (1 - step_share) * self._step_prediction(self._index)
            left += sum(
                self._step_prediction(i)
                for i in range(self._index + 1, len(self._segments) + 1)
            )
            scale = (
                self._actual_done / self._predicted_done
                if self._predicted_done > 0 and self._actual_done > 0
                else 1.0
            )
            return max(0.0, left * scale)
        read = self._tokens_read() - self._resumed_tokens
        elapsed = now - self._started
        if read <= 0 or elapsed <= 0:
            return 0.0
        return elapsed / read * (self.total_tokens - self._tokens_read())

    def _step_prediction(self, index: int) -> float:
        """Predicted seconds of step ``index`` (``len(segments)``: the answer)."""
        plan, speed = self._plan, self._plan.speed
        if speed is None:
            return 0.0
        prefix = len(plan.prompts.prefix)
        if plan.mode == "whole":
            if index >= len(self._segments):  # the decode of a whole read
                end = plan.prompts.whole + JOIN_SLACK + plan.needs.document_tokens
                return speed.decode_seconds(end, plan.answer_tokens)
            end = plan.prompts.whole + JOIN_SLACK + plan.needs.document_tokens
            return speed.prefill_seconds(prefix, end)
        notes = plan.notes_tokens
        if index >= len(self._segments):
            end = plan.prompts.answer + JOIN_SLACK + notes
            return speed.prefill_seconds(prefix, end) + speed.decode_seconds(
                end, plan.answer_tokens
            )
        span = self._segments[index]
        end = plan.prompts.step + JOIN_SLACK + (notes if index else 0) + span.tokens
        return speed.prefill_seconds(prefix, end) + speed.decode_seconds(end, notes)
