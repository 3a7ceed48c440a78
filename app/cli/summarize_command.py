"""`swapless summarize`: read a long document with a bounded KV cache and answer about it.

For terminals, scripts and tests. The plan comes first, in one line (whole or N
segments of ~K tokens, the predicted KV peak, the time estimate from this machine's
measured speed). On a terminal a progress bar (tqdm) follows the reading on stderr —
segment i of N, tokens read, tokens/s, time left — with one line per finished segment
above it; without a terminal only those lines are written. The answer goes to stdout,
followed by the segments each of its points came from. ``--json`` prints one JSON
object per segment (its notes included) and a final one instead. Ctrl+C stops within
a second (a second Ctrl+C at once); the notes of finished segments are stored, so
running the same command again resumes at the next segment (`app.core.longdoc.resume`).

Files: text, Markdown, source code, HTML, PDF (with a text layer) and Word .docx.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import TYPE_CHECKING

from app.cli import arg_types
from app.core.longdoc.plan.mode import MODES

if TYPE_CHECKING:  # imported when a bar is first shown
    from tqdm import tqdm

EXIT_CANCELLED = 130


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "summarize",
        help="read a long document (text, Markdown, code, HTML, PDF, DOCX) and "
        "answer about it",
        description="Read a document with a KV cache bounded by one segment, then "
        "answer a question about it (default: summarize it). Text, Markdown, source "
        "code, HTML, PDF (with a text layer) and Word .docx files are read. The "
        "document and the answer are stored in a conversation; an interrupted run "
        "resumes at the next segment when run again.",
    )
    parser.add_argument(
        "file", metavar="FILE", help="text, Markdown, code, HTML, PDF or .docx file"
    )
    parser.add_argument(
        "--question",
        type=arg_types.text,
        metavar="TEXT",
        help="what to answer (default: a summary)",
    )
    parser.add_argument(
        "--preset",
        default="long-document",
        metavar="NAME",
        help="task preset (long-document)",
    )
    parser.add_argument(
        "--segment-tokens", type=int, metavar="N", help="tokens per segment"
    )
    parser.add_argument(
        "--notes-tokens",
        type=int,
        metavar="N",
        help="longest notes kept per segment (the preset's summary_max_tokens)",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        default="auto",
        help="auto: whole if it fits comfortably in memory and time, else segments",
    )
    parser.add_argument(
        "--model", metavar="DIR", help="mlx-lm model folder (default: demo)"
    )
    parser.add_argument(
        "--conversation",
        type=arg_types.row_id,
        metavar="ID",
        help="record it in this conversation",
    )
    parser.add_argument(
        "--max-tokens", type=int, metavar="N", help="longest answer, in tokens"
    )
    parser.add_argument("--seed", type=arg_types.seed, default=None, metavar="N")
    parser.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per segment, then one with the answer",
    )
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar, even on a terminal",
    )
    parser.set_defaults(run=run)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class ProgressBar:
    """The tqdm bar on stderr, or nothing when stderr is not a terminal.

    Lines written through `say` appear above the bar without breaking it.
    """

    def __init__(self, enabled: bool):
        self._enabled = enabled
        self._bar: tqdm | None = None

    def say(self, message: str) -> None:
        if self._bar is not None:
            self._bar.write(message, file=sys.stderr)
        else:
            _say(message)

    def update(self, event) -> None:
        """Show a `ReadingProgress`."""
        if not self._enabled:
            return
        from app.core.longdoc.plan.plan_words import duration

        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=event.document_tokens,
                unit="tok",
                file=sys.stderr,
                dynamic_ncols=True,
                # tqdm prefixes a postfix with ", ": the description has no prefix.
                bar_format="{percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} tokens · "
                "{desc}",
            )
        if event.phase == "answering":
            where = "answer"
        else:
            where = f"segment {event.index + 1}/{event.segments}"
            where += " notes" if event.phase == "notes" else ""
        self._bar.n = event.tokens_read
        self._bar.set_description_str(
            f"{where} · {event.tokens_per_s:,.1f} tok/s · {duration(event.eta_s)} left",
            refresh=True,
        )

    def finish(self) -> None:
        """The document is read and the answer is about to stream: end the bar at 100 %.

        The answer goes to stdout on the same terminal; a bar still redrawn on stderr
        would cut through it, so nothing is drawn after this.
        """
        if self._bar is not None:
            self._bar.n = self._bar.total or self._bar.n
            self._bar.set_description_str("read · the answer follows", refresh=True)
        self.close()
        self._enabled = False

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def run(args: argparse.Namespace) -> int:
    """Read the document, print progress and the answer; return the exit code."""
    from app.cli.runtime import open_runtime
    from app.core.longdoc import (
        AnswerChunk,
        LongDocumentRunner,
        ReadingProgress,
        RunFinished,
        RunStarted,
        SegmentFinished,
        read_document,
    )
    from app.core.presets.presets import get_preset

    # Cheap checks first: a bad file or preset is refused before the model loads.
    document = read_document(args.file)
    preset = get_preset(args.preset).with_changes(
        segment_tokens=args.segment_tokens,
        summary_max_tokens=args.notes_tokens,
        max_tokens=args.max_tokens,
    )
    runtime = open_runtime(args.model, conversation_id=args.conversation, say=_say)
    runner = LongDocumentRunner(runtime.engine, runtime.store, preset, seed=args.seed)
    bar = ProgressBar(sys.stderr.isatty() and not args.no_progress)

    def on_sigint(signum, frame):
        if runner.cancelled:  # pressed again: quit now (the reading stays resumable)
            raise KeyboardInterrupt
        runner.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint)
    finished = None
    try:
        events = runner.run(
            document, args.question, conversation_id=args.conversation, mode=args.mode
        )
        for event in events:
            if isinstance(event, ReadingProgress):
                bar.update(event)
            elif isinstance(event, RunStarted):
                _say(
                    f"{document.name}: {event.document_tokens:,} tokens, conversation "
                    f"{event.conversation_id}. {event.mode_reason}"
                )
                _say(f"Plan: {event.plan_line}")
                if event.resumed_from:
                    _say(
                        f"Resuming at segment {event.resumed_from + 1} of "
                        f"{event.segments} (earlier notes are stored)."
                    )
            elif isinstance(event, SegmentFinished):
                bar.say(
                    f"segment {event.index + 1}/{event.segments}: {event.tokens} "
                    f"tokens, {event.tokens_per_s:.1f} tok/s, {event.seconds:.2f} s, "
                    f"KV {_mib(event.kv_bytes)}, peak {_mib(event.peak_memory_bytes)}, "
                    f"notes {event.notes_tokens} tokens"
                )
                if args.json:
                    print(
                        json.dumps(_segment_json(event), ensure_ascii=False), flush=True
                    )
            elif isinstance(event, AnswerChunk) and not args.json:
                bar.finish()
                print(event.text, end="", flush=True)
            elif isinstance(event, RunFinished):
                finished = event
    finally:
        bar.close()
        signal.signal(signal.SIGINT, previous)
        runtime.close()
    assert finished is not None, "a reading that returns ends with RunFinished"
    if args.json:
        print(json.dumps(_final_json(finished), ensure_ascii=False), flush=True)
    else:
        print(flush=True)
    if finished.cancelled:
        if finished.stopped_whole:
            _say(
                "Stopped the whole reading; nothing of it could be kept. Run again "
                "with --mode segments to keep notes as it goes."
            )
        else:
            _say(
                f"Stopped with {finished.next_segment} of {finished.segments} "
                "segment(s) read; run the same command again to resume."
            )
        return EXIT_CANCELLED
    return 0


def _segment_json(event) -> dict:
    """One segment's figures; ``segment`` counts from 1, like the progress line."""
    return {
        "segment": event.index + 1,
        "segments": event.segments,
        "tokens": event.tokens,
        "prompt_tokens": event.prompt_tokens,
        "context_tokens": event.context_tokens,
        "kv_bytes": event.kv_bytes,
        "peak_memory_bytes": event.peak_memory_bytes,
        "notes_tokens": event.notes_tokens,
        "notes": event.notes,
        "tokens_per_s": round(event.tokens_per_s, 2),
        "prefill_s": round(event.prefill_s, 3),
        "seconds": round(event.seconds, 3),
    }


def _final_json(event) -> dict:
    """The run's result; ``resumed_from`` is the 0-based index of its first segment."""
    return {
        "answer": event.answer,
        "sources": [
            {"point": point, "segments": list(numbers)}
            for point, numbers in event.sources
        ],
        "cancelled": event.cancelled,
        "mode": event.mode,
        "mode_reason": event.mode_reason,
        "document_tokens": event.document_tokens,
        "segments": event.segments,
        "resumed_from": event.resumed_from,
        "next_segment": event.next_segment,
        "max_kv_bytes": event.max_kv_bytes,
        "peak_memory_bytes": event.peak_memory_bytes,
        "seconds": round(event.seconds, 3),
        "conversation_id": event.conversation_id,
        "document_id": event.document_id,
    }
