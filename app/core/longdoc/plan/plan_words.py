"""The plan and the progress of a reading in words: one line before, one line during.

Shared by the CLI and the app so both say the same thing with the same numbers.
"""

from __future__ import annotations


def duration(seconds: float) -> str:
    """A duration a person reads at a glance: ``45 s``, ``7 min``, ``1 h 05 min``."""
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def mib(n: int) -> str:
    """Bytes as MiB with one decimal."""
    return f"{n / 2**20:,.1f} MiB"


def plan_line(
    mode: str,
    *,
    document_tokens: int,
    segments: int,
    segment_tokens: int,
    kv_bytes_limit: int,
    kv_bits: int,
    estimate_s: float | None,
) -> str:
    """The plan in one line, e.g. ``6 segments of ~8,192 tokens · KV ≤ 41.2 MiB …``.

    Args:
        mode: ``whole`` or ``segments``.
        document_tokens: Tokens of the document.
        segments: Segments planned.
        segment_tokens: Tokens of the longest segment.
        kv_bytes_limit: Predicted KV peak of the reading.
        kv_bits: KV precision.
        estimate_s: Predicted wall time, or None when nothing was measured.
    """
    if mode == "whole":
        how = f"Read whole ({document_tokens:,} tokens)"
    else:
        noun = "segment" if segments == 1 else "segments"
        how = f"{segments} {noun} of ~{segment_tokens:,} tokens"
    kv = f"KV peak {mib(kv_bytes_limit)} ({kv_bits}-bit)"
    when = (
        f"about {duration(estimate_s)}"
        if estimate_s is not None
        else "time unknown (nothing measured yet)"
    )
    return f"{how} · {kv} · {when}"


def progress_line(event) -> str:
    """One line for a `ReadingProgress`: where it is, how fast, how long is left."""
    if event.phase == "answering":
        where = "Writing the answer"
    else:
        where = f"Segment {event.index + 1} of {event.segments}"
        if event.phase == "notes":
            where += ", writing notes"
    return (
        f"{where} · {event.tokens_read:,} of {event.document_tokens:,} tokens read · "
        f"{event.tokens_per_s:,.1f} tok/s · {duration(event.eta_s)} left"
    )
