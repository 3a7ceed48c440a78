"""`swapless chat`: a headless chat for terminals, scripts and tests.

Reads one user turn per line from stdin and answers each in the same stored
conversation; a REPL with a prompt when stdin is a terminal. ``--json`` prints one JSON
object per turn. Every conversation is saved; ``--conversation ID`` continues one.
``--json-schema FILE`` makes every reply JSON that validates against the schema.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from app.cli import arg_types
from app.core.errors import BudgetError
from app.core.presets.generation_settings import VALID_KV_BITS, VALID_KV_GROUPS
from app.core.presets.presets import VALID_TRIM_METHODS
from app.core.text.unicode_text import decode_line, invalid_text


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "chat",
        help="chat in the terminal (one user turn per line on stdin)",
        description="Chat with a local mlx-lm model in the terminal. Settings not given "
        "come from the preset (default: chat).",
    )
    parser.add_argument(
        "--model", metavar="DIR", help="mlx-lm model folder (default: demo)"
    )
    parser.add_argument(
        "--conversation",
        type=arg_types.row_id,
        metavar="ID",
        help="continue a stored one",
    )
    parser.add_argument(
        "--preset", default=None, metavar="NAME", help="task preset (chat)"
    )
    parser.add_argument(
        "--system",
        default=None,
        type=arg_types.text,
        metavar="TEXT",
        help="system prompt",
    )
    parser.add_argument("--kv-bits", type=int, choices=VALID_KV_BITS)
    parser.add_argument("--kv-group", type=int, choices=VALID_KV_GROUPS)
    parser.add_argument("--quantized-kv-start", type=int, metavar="N")
    parser.add_argument(
        "--max-context", type=int, metavar="N", help="trim above N tokens"
    )
    parser.add_argument(
        "--keep-ratio", type=float, metavar="R", help="share kept (0.1-0.9)"
    )
    parser.add_argument("--trim", choices=VALID_TRIM_METHODS, help="splice or rebuild")
    parser.add_argument(
        "--summary", choices=("model", "extractive"), help="summary mode"
    )
    parser.add_argument(
        "--no-auto-trim", action="store_true", help="refuse instead of trim"
    )
    parser.add_argument("--max-tokens", type=int, metavar="N")
    parser.add_argument("--temp", type=float, metavar="T")
    parser.add_argument("--top-p", type=float, metavar="P")
    parser.add_argument("--seed", type=arg_types.seed, default=None, metavar="N")
    parser.add_argument("--json", action="store_true", help="one JSON object per turn")
    parser.add_argument(
        "--json-schema",
        metavar="FILE",
        help="every reply is JSON valid against this schema (enforced token by token)",
    )
    parser.set_defaults(run=run)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _preset_from_args(args, base):
    return base.with_changes(
        kv_bits=args.kv_bits,
        kv_group=args.kv_group,
        quantized_kv_start=args.quantized_kv_start,
        max_context=args.max_context,
        keep_ratio=args.keep_ratio,
        trim_method=args.trim,
        summary_mode=args.summary,
        auto_trim=False if args.no_auto_trim else None,
        max_tokens=args.max_tokens,
        temperature=args.temp,
        top_p=args.top_p,
        system_prompt=args.system,
    )


def _read_line() -> str:
    """One line of stdin; bytes that are not UTF-8 stay visible as escapes.

    Read as bytes where stdin has them, so the check does not depend on the
    locale's error handler (strict would raise, surrogateescape would pass).
    """
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return sys.stdin.readline()
    return decode_line(buffer.readline())[0]


def _run_turn(turn, show: bool):
    """Loop over a turn's events, printing the reply and trims when ``show``."""
    from app.core.chat.turn_events import Trimmed, TurnFinished
    from app.core.engine.events import GenerationEvent

    report = None
    output_closed = False
    for event in turn:
        if isinstance(event, TurnFinished):
            report = event.report
        elif not show or output_closed:
            continue
        elif isinstance(event, GenerationEvent):
            try:
                print(event.text, end="", flush=True)
            except BrokenPipeError:
                # `swapless chat | head`: the reader has gone. The reply stops and is
                # kept as interrupted; main() then ends the command quietly.
                output_closed = True
                turn.cancel()
        elif isinstance(event, Trimmed):
            o = event.outcome
            _say(
                f"[trimmed: {o.dropped_messages} messages summarised "
                f"({o.summary_method}, {o.summary_tokens} tokens), cache "
                f"{o.cache_method} in {o.cache_ms:.0f} ms"
                + (f"; {o.note}" if o.note else "")
                + "]"
            )
    if output_closed:
        raise BrokenPipeError
    return report


def run(args: argparse.Namespace) -> int:
    """Run the chat loop until stdin ends."""
    from app.cli.runtime import open_runtime
    from app.core.chat.conversation_session import ConversationSession
    from app.core.presets.presets import get_preset

    schema = None
    if args.json_schema:
        from app.core.tools.schema_file import load_schema_file

        # Checked before the model loads: a bad file costs nothing.
        schema = load_schema_file(args.json_schema)
    runtime = open_runtime(args.model, conversation_id=args.conversation, say=_say)
    store, engine = runtime.store, runtime.engine
    if schema is not None:
        from app.core.tools.schema_file import SchemaEngine

        engine = SchemaEngine(engine, schema)
    if args.conversation is not None:
        session = ConversationSession(
            engine, store, args.conversation, **runtime.session_kwargs(args.seed)
        )
        overrides = _preset_from_args(
            args, session.preset if args.preset is None else get_preset(args.preset)
        )
        if overrides != session.preset:
            session.apply_preset(overrides)
    else:
        preset = _preset_from_args(args, get_preset(args.preset or "chat"))
        session = ConversationSession.start(
            engine,
            store,
            preset,
            model=runtime.model_info.folder,
            **runtime.session_kwargs(args.seed),
        )
    interactive = sys.stdin.isatty() and not args.json
    if interactive:
        _say(
            f"Model: {runtime.model_info.folder}. Conversation {session.conversation_id}, "
            f"preset {session.preset.name}, limit {session.effective_limit()} tokens. "
            "Ctrl+D quits, Ctrl+C stops a reply."
        )

    def on_sigint(signum, frame):
        session.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint) if interactive else None
    status = 0
    line_number = 0
    try:
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line, line_number = _read_line(), line_number + 1
            if not line:
                break
            text = line.rstrip("\n")
            if not text.strip():
                continue
            fault = invalid_text(text)
            if fault is not None:
                # Refused at the edge, in words; the next lines are still answered.
                message = (
                    f"line {line_number} of the input is not UTF-8 text ({fault}); "
                    "it was not sent"
                )
                _say(f"swapless: error: {message}")
                if args.json:
                    print(json.dumps({"error": message, "refused": True}), flush=True)
                status = 2 if not interactive else 0
                continue
            try:
                if interactive:
                    print("swapless> ", end="", flush=True)
                report = _run_turn(session.send(text), show=not args.json)
                if args.json:
                    print(json.dumps(report.to_json(), ensure_ascii=False), flush=True)
                    continue
                print(flush=True)
                if interactive:
                    _say(
                        f"[{report.generated_tokens} tokens, {report.tokens_per_s:.1f} tok/s, "
                        f"TTFT {report.ttft_s:.2f} s, context {report.context_tokens}/"
                        f"{report.effective_max_context} tokens, KV "
                        f"{report.kv_bytes / 2**20:.1f} MiB at {report.kv_bits}-bit]"
                    )
            except BudgetError as exc:
                # A refused turn is not fatal in a chat: say why and read the next one.
                _say(f"swapless: {exc}")
                if args.json:
                    print(json.dumps({"error": str(exc), "refused": True}), flush=True)
                status = 2 if not interactive else 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        runtime.close()
    return status
