"""One step of a reading on the engine: a prompt in, text pieces and progress out.

Every step (a segment's notes, the answer) runs through ``side_generate`` on the run's
cache, which trims the cache back to the prefix its prompt shared, so only the system
prompt and the question survive from one step to the next. A step is a generator
yielding the engine's `PrefillProgress` events and text pieces (``str``), and
returning the final `GenerationEvent`; whoever drives it turns those into
`ReadingProgress` and saves the text. Leaving a step early cancels it in the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from app.core.cancel import CancelToken
from app.core.engine.events import GenerationEvent, PrefillProgress
from app.core.longdoc.events import ReadingProgress
from app.core.longdoc.progress import ProgressTracker

PROGRESS_EVERY_TOKENS = 8
"""Generated tokens between two progress events while notes or the answer are written."""

StepItem = PrefillProgress | GenerationEvent
"""What a step yields: prefill progress, or a generated piece (``text`` may be "")."""


def run_step(
    engine,
    key: str,
    ids: list[int],
    kv,
    sampling,
    *,
    limit: int,
    cancel: CancelToken,
) -> Generator[StepItem, None, GenerationEvent]:
    """Run one step on the cache ``key``; yield its events, return its final event.

    Args:
        engine: The engine.
        key: The run's cache key.
        ids: The step's whole prompt.
        kv: KV precision.
        sampling: Sampling settings (``max_tokens`` bounds the step's output).
        limit: The planned context: a prompt that could pass it is refused before
            anything is allocated.
        cancel: The run's cancel token (the engine polls it between prefill chunks
            and after every token).

    Raises:
        RuntimeError: The step could pass the context the plan promised (a bug in
            the plan's arithmetic).
    """
    if len(ids) + sampling.max_tokens > limit:
        raise RuntimeError(
            f"a step of {len(ids)} prompt + {sampling.max_tokens} new tokens "
            f"would pass the planned context of {limit} tokens"
        )
    handle = engine.side_generate(key, ids, kv, sampling, cancel=cancel)
    try:
        for event in handle:
            if isinstance(event, PrefillProgress | GenerationEvent):
                yield event
    finally:
        if handle.final is None:  # the consumer left early: stop the engine too
            handle.cancel()
    return handle.final


def follow_step(
    step: Generator[StepItem, None, GenerationEvent],
    tracker: ProgressTracker,
    on_text: Callable[[str], None],
    *,
    whole: bool = False,
) -> Generator[ReadingProgress, None, GenerationEvent]:
    """Drive a step, turning its events into progress; return its final event.

    Args:
        step: From `run_step`.
        tracker: The run's progress.
        on_text: Receives every generated piece.
        whole: The step is a whole read: its decode is the answer, so the tracker
            switches to answering at the first generated token.
    """
    decoding = False
    while True:
        try:
            event = next(step)
        except StopIteration as stop:
            return stop.value
        if isinstance(event, PrefillProgress):
            if event.total and event.processed < event.total:
                yield tracker.prefill(event.processed, event.total)
            continue
        if not decoding:
            decoding = True
            if whole:
                tracker.finish_step()
                yield tracker.answering()
        if event.text and event.channel == "answer":  # notes, not the model's thoughts
            on_text(event.text)
        if event.generated_tokens % PROGRESS_EVERY_TOKENS == 0:
            yield tracker.writing(event.generated_tokens, event.tokens_per_s)
