"""`swapless chat`: a headless chat for terminals, scripts and tests.

Reads one user turn per line from stdin and answers each in the same conversation; a
REPL with a prompt when stdin is a terminal. ``--json`` prints one JSON object per turn.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

from app.core.generation_settings import (
    DEFAULT_KV_GROUP,
    DEFAULT_MAX_TOKENS,
    VALID_KV_BITS,
    VALID_KV_GROUPS,
    KVSettings,
    SamplingSettings,
)


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "chat",
        help="chat in the terminal (one user turn per line on stdin)",
        description="Chat with a local mlx-lm model in the terminal.",
    )
    parser.add_argument(
        "--model", metavar="DIR", help="mlx-lm model folder (default: demo)"
    )
    parser.add_argument("--system", default="", metavar="TEXT", help="system prompt")
    parser.add_argument("--kv-bits", type=int, choices=VALID_KV_BITS, default=8)
    parser.add_argument(
        "--kv-group", type=int, choices=VALID_KV_GROUPS, default=DEFAULT_KV_GROUP
    )
    parser.add_argument("--quantized-kv-start", type=int, default=0, metavar="N")
    parser.add_argument(
        "--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, metavar="N"
    )
    parser.add_argument("--temp", type=float, default=0.7, metavar="T")
    parser.add_argument("--top-p", type=float, default=0.95, metavar="P")
    parser.add_argument("--seed", type=int, default=None, metavar="N")
    parser.add_argument("--json", action="store_true", help="one JSON object per turn")
    parser.set_defaults(run=run)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_engine(model: str | None):
    """Start the engine and load ``model`` (or the demo model); return it and its info."""
    from app.core.engine.demo_model import DEMO_NOTICE, ensure_demo_model
    from app.core.engine.engine import Engine

    engine = Engine()
    if model is None:
        _say(DEMO_NOTICE)
        folder = ensure_demo_model()
    else:
        folder = model
    info = engine.load(folder)
    if info.random_weights and model is not None:
        _say(f"Note: {info.folder} has random weights; its replies are noise.")
    return engine, info


def run(args: argparse.Namespace) -> int:
    """Run the chat loop until stdin ends."""
    from app.core.chat.session import ChatSession

    kv = KVSettings(
        bits=args.kv_bits,
        group_size=args.kv_group,
        quantized_kv_start=args.quantized_kv_start,
    )
    sampling = SamplingSettings(
        temperature=args.temp,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    engine, info = load_engine(args.model)
    session = ChatSession(engine, system_prompt=args.system, kv=kv, sampling=sampling)
    interactive = sys.stdin.isatty() and not args.json
    if interactive:
        _say(
            f"Model: {info.folder} ({info.model_type}). Type a message; Ctrl+D quits, Ctrl+C stops a reply."
        )

    def on_sigint(signum, frame):
        session.cancel()

    previous = signal.signal(signal.SIGINT, on_sigint) if interactive else None
    try:
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = sys.stdin.readline()
            if not line:
                break
            text = line.rstrip("\n")
            if not text.strip():
                continue
            if args.json:
                report = session.send(text)
                print(json.dumps(report.to_json(), ensure_ascii=False), flush=True)
            else:
                if interactive:
                    print("swapless> ", end="", flush=True)
                report = session.send(
                    text, on_text=lambda t: print(t, end="", flush=True)
                )
                print(flush=True)
                if interactive:
                    _say(
                        f"[{report.generated_tokens} tokens, {report.tokens_per_s:.1f} tok/s, "
                        f"TTFT {report.ttft_s:.2f} s, context {report.context_tokens} tokens, "
                        f"KV {report.kv_bytes / 2**20:.1f} MiB at {report.kv_bits}-bit]"
                    )
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        engine.shutdown()
    return 0
