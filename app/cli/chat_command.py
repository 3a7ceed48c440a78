"""`swapless chat`: a headless chat for terminals, scripts and tests.

Reads one user turn per line from stdin and answers each in the same stored
conversation; a REPL with a prompt when stdin is a terminal, where a few slash commands
(`COMMANDS`) are understood and anything else is sent as is. ``--json`` prints one JSON
object per turn. Every conversation is saved; ``--conversation ID`` continues one.
``--json-schema FILE`` makes every reply JSON that validates against the schema.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import TYPE_CHECKING

from app.cli import arg_types
from app.cli.mcp_command import add_chat_arguments, tool_event_line
from app.core.errors import BudgetError
from app.core.presets.generation_settings import VALID_KV_BITS, VALID_KV_GROUPS
from app.core.presets.presets import VALID_TRIM_METHODS
from app.core.text.unicode_text import decode_line, invalid_text

if TYPE_CHECKING:
    from app.core.chat.tool_setup import ToolSetup


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
    parser.add_argument("--quantized-kv-start", type=arg_types.count, metavar="N")
    parser.add_argument(
        "--max-context",
        type=arg_types.positive,
        metavar="N",
        help="trim above N tokens",
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
    parser.add_argument("--max-tokens", type=arg_types.positive, metavar="N")
    parser.add_argument("--temp", type=float, metavar="T")
    parser.add_argument("--top-p", type=float, metavar="P")
    parser.add_argument("--seed", type=arg_types.seed, default=None, metavar="N")
    parser.add_argument(
        "--thinking",
        choices=("on", "off"),
        help="a reasoning model thinks before answering (its template's switch)",
    )
    parser.add_argument(
        "--thinking-budget",
        type=int,
        metavar="N",
        help="end a reasoning model's thought after N tokens (0: no budget)",
    )
    parser.add_argument(
        "--hide-reasoning",
        action="store_true",
        help="do not print a reasoning model's thoughts (they are still stored)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per turn")
    add_chat_arguments(parser)
    parser.add_argument(
        "--json-schema",
        metavar="FILE",
        help="every reply is JSON valid against this schema (enforced token by token)",
    )
    parser.set_defaults(run=run)


COMMANDS = {
    "/help": "list these commands",
    "/new": "start a new conversation (same model and settings)",
    "/preset NAME": "use another preset from the next message (`swapless presets`)",
    "/quit": "leave (Ctrl+D too)",
}
HELP = (
    "Commands: "
    + "; ".join(f"{name}: {what}" for name, what in COMMANDS.items())
    + ". Any other line is sent to the model as is (start it with // to send a "
    "line that begins with /)."
)


DIM = "\x1b[2m"
RESET = "\x1b[0m"


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
        thinking=None if args.thinking is None else args.thinking == "on",
        thinking_budget=args.thinking_budget,
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


class _ReplyPrinter:
    """Prints a reply's text: reasoning dimmed on a terminal (or hidden), then the answer."""

    def __init__(self, show_reasoning: bool, terminal: bool) -> None:
        self.show_reasoning = show_reasoning
        self.terminal = terminal
        self.channel = "answer"
        self.printed_reasoning = False

    def print(self, text: str, channel: str) -> None:
        if channel == "reasoning" and not self.show_reasoning:
            return
        if channel != self.channel:
            if channel == "reasoning" and self.terminal:
                print(DIM, end="")
            elif self.channel == "reasoning":
                print((RESET if self.terminal else "") + "\n", end="")
            self.channel = channel
        self.printed_reasoning |= channel == "reasoning"
        print(text, end="", flush=True)

    def end(self) -> None:
        if self.channel == "reasoning" and self.terminal:
            print(RESET, end="", flush=True)
        self.channel = "answer"


def _run_turn(turn, show: bool, show_reasoning: bool = True):
    """Loop over a turn's events, printing the reply and trims when ``show``."""
    from app.core.chat.turn_events import Recalled, Trimmed, TurnFinished
    from app.core.engine.events import GenerationEvent
    from app.core.notice_words import messages_noun

    report = None
    output_closed = False
    printer = _ReplyPrinter(show_reasoning, sys.stdout.isatty())
    for event in turn:
        if isinstance(event, TurnFinished):
            report = event.report
        elif not show or output_closed:
            continue
        elif (line := tool_event_line(event)) is not None:
            _say(line)
        elif isinstance(event, GenerationEvent):
            try:
                printer.print(event.text, event.channel)
                if event.finished:
                    printer.end()
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
        elif isinstance(event, Recalled):
            _say(
                f"[recalled {messages_noun(len(event.messages))} from before the "
                "summary" + ("; one was cut to fit" if event.cut else "") + "]"
            )
    if output_closed:
        raise BrokenPipeError
    if show and report is not None and report.reasoning_truncated:
        _say(
            "[the reply reached max_tokens while the model was still reasoning: "
            "no answer was written; raise --max-tokens or set --thinking-budget]"
        )
    return report


def run(args: argparse.Namespace) -> int:
    """Run the chat loop until stdin ends (or ``/quit``)."""
    from app.cli.runtime import open_runtime
    from app.core.presets.presets import get_preset

    # Settings are checked before the model loads: a bad value costs no wait.
    _preset_from_args(args, get_preset(args.preset or "chat"))
    schema = None
    if args.json_schema:
        from app.core.tools.schema_file import load_schema_file

        schema = load_schema_file(args.json_schema)
    from app.cli.mcp_command import chat_tools

    # A bad --mcp file is one line before the model loads; servers start here.
    interactive = sys.stdin.isatty() and not args.json
    tools, host = chat_tools(args, interactive, _read_line, _say)
    try:
        runtime = open_runtime(args.model, conversation_id=args.conversation, say=_say)
        try:
            return _Chat(args, runtime, schema, tools).loop()
        finally:
            runtime.close()
    finally:
        if host is not None:
            host.close()


class _Chat:
    """One terminal chat: its session, the prompt and the slash commands."""

    def __init__(
        self,
        args: argparse.Namespace,
        runtime,
        schema: dict | None = None,
        tools: ToolSetup | None = None,
    ):
        self.args = args
        self.tools = tools
        self.runtime = runtime
        # With --json-schema every reply is constrained to the schema.
        self.engine = runtime.engine
        if schema is not None:
            from app.core.tools.schema_file import SchemaEngine

            self.engine = SchemaEngine(runtime.engine, schema)
        self.line_number = 0
        self.interactive = sys.stdin.isatty() and not args.json
        self.replying = False
        self.session = self._open_session(args.conversation)

    def _open_session(
        self, conversation_id: int | None, preset_name: str | None = None
    ):
        from app.core.chat.conversation_session import ConversationSession
        from app.core.mcp.consent import ConsentPolicy
        from app.core.presets.presets import get_preset

        args, runtime = self.args, self.runtime
        name = preset_name or args.preset
        kwargs = runtime.session_kwargs(args.seed)
        if self.tools is not None:
            # "Always" holds for one conversation: another starts from Settings'.
            self.tools.policy = ConsentPolicy(trusted=self.tools.policy.trusted)
            kwargs["tools"] = self.tools
        if conversation_id is not None:
            session = ConversationSession(
                self.engine, runtime.store, conversation_id, **kwargs
            )
            base = session.preset if name is None else get_preset(name)
            overrides = _preset_from_args(args, base)
            if overrides != session.preset:
                session.apply_preset(overrides)
            return session
        preset = _preset_from_args(args, get_preset(name or "chat"))
        return ConversationSession.start(
            self.engine,
            runtime.store,
            preset,
            model=runtime.model_info.folder,
            **kwargs,
        )

    def _greet(self) -> None:
        session = self.session
        _say(
            f"Model: {self.runtime.model_info.folder}. Conversation "
            f"{session.conversation_id}, preset {session.preset.name}, limit "
            f"{session.effective_limit()} tokens. Ctrl+C stops a reply, /help lists "
            "the commands, Ctrl+D or /quit leaves."
        )

    def loop(self) -> int:
        if self.interactive:
            self._greet()
        previous = (
            signal.signal(signal.SIGINT, self._on_sigint) if self.interactive else None
        )
        status = 0
        try:
            while True:
                if self.interactive:
                    print("you> ", end="", flush=True)
                line = _read_line()
                self.line_number += 1
                if not line:
                    if self.interactive:
                        print(flush=True)  # the shell's prompt starts on its own line
                    break
                text = line.rstrip("\n")
                if not text.strip():
                    continue
                fault = invalid_text(text)
                if fault is not None:
                    status = max(status, self._refuse_line(fault))
                    continue
                if self.interactive and text.startswith("/"):
                    if text.startswith("//"):
                        text = text[1:]
                    else:
                        if self._command(text.strip()) == "quit":
                            break
                        continue
                status = max(status, self._turn(text))
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        return status

    def _refuse_line(self, fault: str) -> int:
        """Refuse a line that is not UTF-8, in words; the next lines are answered."""
        message = (
            f"line {self.line_number} of the input is not UTF-8 text ({fault}); "
            "it was not sent"
        )
        _say(f"swapless: error: {message}")
        if self.args.json:
            print(json.dumps({"error": message, "refused": True}), flush=True)
        return 2 if not self.interactive else 0

    def _on_sigint(self, signum, frame) -> None:
        if self.replying:
            self.session.cancel()
        else:
            print("\n(Ctrl+D or /quit leaves)\nyou> ", end="", flush=True)

    def _command(self, text: str) -> str | None:
        """Run one slash command; "quit" when the chat should end."""
        from app.core.errors import KnownError

        name, _, rest = text.partition(" ")
        if name in ("/quit", "/exit"):
            return "quit"
        if name == "/help":
            _say(HELP)
        elif name == "/new":
            self.session = self._open_session(None, self.session.preset.name)
            self._greet()
        elif name == "/preset" and rest.strip():
            try:
                self.session = self._open_session(
                    self.session.conversation_id, rest.strip()
                )
            except (KnownError, ValueError) as exc:
                _say(f"swapless: {exc}")
            else:
                _say(f"Preset {self.session.preset.name} from the next message.")
        elif name == "/preset":
            _say(f"Preset {self.session.preset.name}; /preset NAME changes it.")
        else:
            _say(f"Unknown command {name}. {HELP}")
        return None

    def _turn(self, text: str) -> int:
        """Send one message and show the reply; the exit status it asks for."""
        args = self.args
        try:
            if self.interactive:
                print("swapless> ", end="", flush=True)
            self.replying = True
            try:
                report = _run_turn(
                    self.session.send(text),
                    show=not args.json,
                    show_reasoning=not args.hide_reasoning,
                )
            finally:
                self.replying = False
            if args.json:
                print(json.dumps(report.to_json(), ensure_ascii=False), flush=True)
                return 0
            print(flush=True)
            if self.interactive:
                _say(_turn_line(report))
        except BudgetError as exc:
            # A refused turn is not fatal in a chat: say why and read the next one.
            _say(f"swapless: {exc}")
            if args.json:
                print(json.dumps({"error": str(exc), "refused": True}), flush=True)
            return 2 if not self.interactive else 0
        return 0


def _turn_line(report) -> str:
    """The figures after a reply; a stopped reply says so first."""
    stopped = "stopped · " if report.finish_reason == "cancelled" else ""
    if report.generated_tokens == 0 and not stopped:
        stopped = "the model ended its reply at once · "
    return (
        f"[{stopped}{report.generated_tokens} tokens, {report.tokens_per_s:.1f} tok/s, "
        f"TTFT {report.ttft_s:.2f} s, context {report.context_tokens}/"
        f"{report.effective_max_context} tokens, KV "
        f"{report.kv_bytes / 2**20:.1f} MiB at {report.kv_bits}-bit]"
    )
