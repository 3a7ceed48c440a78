"""Whole document or segments: the choice, and a sentence with the numbers behind it.

Reading a document whole gives the model everything at once but needs a KV cache as
long as the document; reading it in segments bounds the cache by one segment plus the
notes, whatever the document's length. "auto" reads whole only when that is
comfortable: the whole prompt plus the answer fits in half of the machine's safe
context (the other half is headroom for the rest of the conversation and for memory
the budget does not see), in the preset's ``max_context``, and its predicted time on
this machine is at most `WHOLE_COMFORT_SECONDS`: a whole read keeps nothing when it is
stopped, so the work at stake is bounded, while segments keep their notes as they go.
Pure: numbers in, a `ModeChoice` out, so every branch is tested without a model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from app.core.errors import BudgetError
from app.core.longdoc.plan.plan_words import duration

MODES = ("auto", "whole", "segments")
COMFORT_SHARE = 0.5
"""Share of the max safe context a whole-document read may take in "auto" mode."""
WHOLE_COMFORT_SECONDS = 120.0
"""Longest predicted whole read "auto" chooses: past it, segments (which keep their
notes when stopped and show progress per segment) are read instead."""


@dataclass(frozen=True)
class ContextNeeds:
    """What each way of reading a document needs, in tokens of context.

    Attributes:
        document_tokens: Tokens of the document's text.
        whole_tokens: Prompt with the whole document plus the longest answer.
        segment_tokens: Most tokens of document text per segment.
        segments: Number of segments.
        segment_context: Most context one segment's step can hold (prompt with notes
            and segment, plus the longest new notes), also bounding the final answer.
    """

    document_tokens: int
    whole_tokens: int
    segment_tokens: int
    segments: int
    segment_context: int


@dataclass(frozen=True)
class Controls:
    """Where the user changes what a refusal advises, in the words of where it is read.

    The defaults are the ``summarize`` command's options; the app passes its own
    buttons and preset fields, so its advice never names a command-line flag.

    Attributes:
        segments: How to read in segments.
        segment_tokens: Where tokens per segment are set.
        notes_tokens: Where the notes' length is set.
        max_tokens: Where the answer's length is set.
    """

    segments: str = "--mode segments"
    segment_tokens: str = "--segment-tokens"
    notes_tokens: str = "--notes-tokens"
    max_tokens: str = "--max-tokens"


CLI_CONTROLS = Controls()


@dataclass(frozen=True)
class Limit:
    """The context a reading must stay inside, and what sets it.

    Attributes:
        tokens: The limit, or None when nothing limits the context.
        name: What sets it, in words ("the 4,096 tokens the model was trained for").
        memory: Memory sets it (fewer tokens per segment or a smaller KV cache help).
    """

    tokens: int | None
    name: str = ""
    memory: bool = True


@dataclass(frozen=True)
class ModeChoice:
    """How a document will be read.

    Attributes:
        mode: ``whole`` or ``segments``.
        reason: One sentence with the numbers that decided it.
        context_tokens: Most tokens of context the chosen way holds at once.
    """

    mode: str
    reason: str
    context_tokens: int


def choose_mode(
    requested: str,
    needs: ContextNeeds,
    *,
    max_safe_context: int | None,
    max_context: int,
    segmenting: bool,
    kv_bits: int,
    kv_bytes: Callable[[int], int],
    whole_seconds: float | None = None,
    limit: Limit | None = None,
    controls: Controls = CLI_CONTROLS,
) -> ModeChoice:
    """Decide how to read a document.

    Args:
        requested: ``auto``, ``whole`` or ``segments``.
        needs: The context each way needs.
        max_safe_context: Longest context inside the memory budget at this KV
            precision, or None when memory does not limit it.
        max_context: The preset's context limit.
        segmenting: The preset prefers segments when a whole read is not comfortable
            (without it, ``auto`` picks them only when a whole read cannot fit).
        kv_bits: KV precision, for the explanation.
        kv_bytes: Returns the KV bytes at a number of tokens, for the explanation.
        whole_seconds: Predicted wall time of a whole read on this machine, or None
            when nothing was measured (time then does not decide).
        limit: What sets ``max_safe_context``, for a refusal (memory when omitted).
        controls: The names of the controls a refusal advises.

    Returns:
        The mode and why.

    Raises:
        ValueError: An unknown mode.
        BudgetError: The chosen way does not fit in the safe context, with the numbers.
    """
    if requested not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {requested!r}")
    if limit is None or limit.tokens != max_safe_context:
        limit = Limit(
            max_safe_context, f"the safe limit of {max_safe_context or 0:,} tokens"
        )
    safe = None if max_safe_context is None else f"{max_safe_context:,}"
    whole = (
        f"the document ({needs.document_tokens:,} tokens) with its prompt and answer "
        f"needs {needs.whole_tokens:,} tokens of context "
        f"({_mib(kv_bytes(needs.whole_tokens))} of {kv_bits}-bit KV)"
    )
    segments = (
        f"reading it in {needs.segments} segment(s) of up to "
        f"{needs.segment_tokens:,} tokens needs at most {needs.segment_context:,} "
        f"tokens of context ({_mib(kv_bytes(needs.segment_context))} of "
        f"{kv_bits}-bit KV) whatever the document's length"
    )
    too_long = max_safe_context is not None and needs.whole_tokens > max_safe_context
    if requested == "auto" and not segmenting and too_long:
        # The preset prefers whole reads, but this one cannot be: segments can.
        _require_fit(
            needs.segment_context,
            limit,
            "One segment",
            segments,
            _segment_advice(controls, limit),
        )
        return ModeChoice(
            "segments",
            f"Segments (the preset reads whole when it can): {whole}, more than "
            f"{limit.name}; {segments}.",
            needs.segment_context,
        )
    if requested == "whole" or (requested == "auto" and not segmenting):
        _require_fit(
            needs.whole_tokens,
            limit,
            "Reading it whole",
            whole,
            _whole_advice(controls),
        )
        why = "as asked" if requested == "whole" else "the preset does not segment"
        within = f", within the safe limit of {safe} tokens" if safe else ""
        return ModeChoice(
            "whole", f"Whole document ({why}): {whole}{within}.", needs.whole_tokens
        )
    if requested == "segments":
        _require_fit(
            needs.segment_context,
            limit,
            "One segment",
            segments,
            _segment_advice(controls, limit),
        )
        return ModeChoice(
            "segments", f"Segments (as asked): {segments}.", needs.segment_context
        )
    memory_limit = f"{COMFORT_SHARE:.0%} of the safe limit of {safe} tokens"
    preset_limit = f"the preset's max_context of {max_context:,}"
    fits_memory = (
        max_safe_context is None
        or needs.whole_tokens <= max_safe_context * COMFORT_SHARE
    )
    fits_preset = needs.whole_tokens <= max_context
    fits_time = whole_seconds is None or whole_seconds <= WHOLE_COMFORT_SECONDS
    time_limit = (
        f"{duration(WHOLE_COMFORT_SECONDS)} of reading (about "
        f"{duration(whole_seconds or 0)} predicted here)"
    )
    if fits_memory and fits_preset and fits_time:
        limits = [memory_limit] if safe else []
        limits += [preset_limit]
        if whole_seconds is not None:
            limits += [f"{duration(WHOLE_COMFORT_SECONDS)} of reading"]
        within = " and ".join(limits)
        return ModeChoice(
            "whole", f"Whole document: {whole}, within {within}.", needs.whole_tokens
        )
    _require_fit(
        needs.segment_context,
        limit,
        "One segment",
        segments,
        _segment_advice(controls, limit),
    )
    past = [memory_limit] if not fits_memory else []
    past += [preset_limit] if not fits_preset else []
    past += [time_limit] if not fits_time else []
    return ModeChoice(
        "segments",
        f"Segments: {whole}, more than {' and '.join(past)}; {segments}.",
        needs.segment_context,
    )


def _whole_advice(controls: Controls) -> str:
    return (
        f"Read it in segments ({controls.segments}) or ask for a shorter answer "
        f"({controls.max_tokens})."
    )


def _segment_advice(controls: Controls, limit: Limit) -> str:
    smaller = (
        f"fewer tokens per segment ({controls.segment_tokens}), "
        if limit.memory
        else ""
    )
    return (
        f"Use {smaller}shorter notes ({controls.notes_tokens}) or a shorter answer "
        f"({controls.max_tokens})."
    )


def _require_fit(
    tokens: int, limit: Limit, what: str, detail: str, advice: str
) -> None:
    if limit.tokens is None or tokens <= limit.tokens:
        return
    where = "this machine's memory" if limit.memory else "the model's context"
    raise BudgetError(
        f"{what} does not fit in {where}: {detail}, more than {limit.name}. {advice}"
    )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"
