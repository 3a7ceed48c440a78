"""The `swapless` command: the desktop app by default, plus headless subcommands.

Subcommands are for people without a display, scripts and tests. Every `KnownError`
(and the core's argument `ValueError`s, and errors of the environment such as a full
disk) becomes one line on stderr and exit code 2; a reader that closes the output early
(``| head``) ends the command quietly; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from app import __version__
from app.cli import arg_types
from app.cli.blas import preload as blas
from app.core.errors import KnownError

EXIT_OK = 0
EXIT_OUTPUT_CLOSED = 0
"""The reader of stdout closed it before everything was written (``| head``): it had
what it wanted, so the command succeeded (a pipeline under ``set -o pipefail`` goes on)."""
EXIT_USAGE = 2
# An error line is for a person: a library's message can run to megabytes.
MAX_ERROR_CHARS = 1000


class _OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are a single line on stderr, exit code 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"swapless: error: {message}\n")


# Which module registers each subcommand, so that a command imports only its own module
# (the summarize command's module pulls in long-document mode, the store and
# sqlite-utils: a third of a second that `swapless doctor` has no use for).
# tests/cli/test_main.py checks this table against what the modules register.
COMMAND_MODULES: dict[str, str] = {
    "chat": "chat_command",
    "summarize": "summarize_command",
    "conversations": "store_commands",
    "export": "store_commands",
    "import": "store_commands",
    "search": "store_commands",
    "pin": "pin_command",
    "presets": "presets_command",
    "doctor": "doctor_command",
    "make-model": "make_model_command",
    "check-quality": "check_quality_command",
    "bench": "bench_command",
    "serve": "serve_command",
    "mcp": "mcp_command",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Return the parser of every subcommand, or only of ``command`` when it is known.

    Args:
        command: The subcommand about to run; None (or an unknown name) registers all,
            so help and "invalid choice" errors list every command.
    """
    import importlib

    parser = _OneLineParser(
        prog="swapless",
        description="Chat with local MLX models without letting the KV cache eat the machine.",
    )
    parser.add_argument(
        "--version", action="version", version=f"swapless {__version__}"
    )
    parser.add_argument(
        "--smoke-test",
        action="store_true",
        help="start offscreen, load the demo model, generate, save, exit (packaging check)",
    )
    parser.add_argument(
        "--soak",
        type=arg_types.seconds,
        metavar="SECONDS",
        help="run the real window that long (gauge live, replies, a trim) and check it",
    )
    parser.add_argument(
        "--model",
        dest="window_model",
        metavar="DIR",
        help="open the desktop app with this mlx-lm model folder loaded",
    )
    subcommands = parser.add_subparsers(dest="command", parser_class=_OneLineParser)
    if command in COMMAND_MODULES:
        names = [COMMAND_MODULES[command]]
    else:
        names = list(dict.fromkeys(COMMAND_MODULES.values()))
    for name in names:
        importlib.import_module(f"app.cli.{name}").register(subcommands)
    return parser


# Options before the command that take a value (``swapless --model DIR``).
_VALUE_OPTIONS = ("--model", "--soak")


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named in ``argv`` (its first non-option word), if any."""
    words = iter(argv)
    for word in words:
        if word in _VALUE_OPTIONS:
            next(words, None)  # its value is not a command
        elif not word.startswith("-"):
            return word
    return None


class _TokenizerLengthFilter(logging.Filter):
    """Drops transformers' "sequence length is longer than the maximum" warning.

    Swapless counts whole documents on purpose (to plan their segments) and checks
    every prompt against the model's trained context before it runs, so the warning
    ("will result in indexing errors") is never true here; it only alarmed users on
    every ``summarize``, under ``serve`` and in the app's terminal.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token indices sequence length")


TOKENIZER_LOGGER = "transformers.tokenization_utils_base"


def quiet_tokenizer_length_warning() -> None:
    """Install `_TokenizerLengthFilter` once (before or after transformers loads)."""
    logger = logging.getLogger(TOKENIZER_LOGGER)
    if not any(isinstance(f, _TokenizerLengthFilter) for f in logger.filters):
        logger.addFilter(_TokenizerLengthFilter())


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    quiet_tokenizer_length_warning()
    blas.reexec_with_openblas(argv)
    parser = build_parser(_command_in(argv))
    args = parser.parse_args(argv)
    if args.smoke_test:
        from app.ui.checks.smoke_test import run_smoke_test

        return run_smoke_test()
    if args.soak is not None:
        from app.ui.checks.soak import run_soak

        return run_soak(args.soak)
    if args.command is None:
        _native_kernel_notice()
        return _run_desktop_or_chat(argv, args.window_model)
    try:
        code = int(args.run(args) or EXIT_OK)
        sys.stdout.flush()  # a reader that left early is noticed here, not at exit
        return code
    except BrokenPipeError:
        return _output_closed()
    except KnownError as exc:
        return _fail(str(exc))
    except ValueError as exc:
        # Argument validation of the core raises ValueError with a user-facing message.
        return _fail(str(exc))
    except OSError as exc:
        # The environment, not a bug: stdout on a full disk, a file that vanished.
        where = f" ({exc.filename})" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}")
    except KeyboardInterrupt:
        return 130


def _native_kernel_notice() -> None:
    """On the first `swapless` start of a kernel build, say in one line whether the
    native quantized kernel is built, and why not (`doctor_command.kernel_notice`)."""
    from app.cli.doctor_command import kernel_notice

    line = kernel_notice()
    if line is not None:
        print(f"swapless: {line}", file=sys.stderr)


def _fail(message: str) -> int:
    """Print ``message`` as one line on stderr; return the usage exit code."""
    line = " ".join(message.split())
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 1] + "…"
    print(f"swapless: error: {line}", file=sys.stderr)
    return EXIT_USAGE


def _output_closed() -> int:
    """Stop quietly when whoever reads our output has gone (``| head``), as cat does."""
    # Point stdout at /dev/null: Python flushes it once more at exit and would
    # report that second broken pipe with a traceback.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OUTPUT_CLOSED


def _run_desktop_or_chat(argv: list[str], model: str | None = None) -> int:
    """Open the desktop app; without a usable display, fall back to the terminal chat.

    Args:
        argv: The arguments given (the chat fallback takes them as they are).
        model: ``--model DIR``: the folder the window loads at start.
    """
    if not _has_display():
        print(
            "swapless: no display found (DISPLAY/WAYLAND_DISPLAY unset); starting the "
            "terminal chat. `swapless chat --help` lists its options.",
            file=sys.stderr,
        )
        return main(["chat", *argv])
    blocker = _window_blocker()
    if blocker is not None:
        print(f"swapless: {blocker}; starting the terminal chat.", file=sys.stderr)
        return main(["chat", *argv])
    try:
        from app.ui.application import run_app
    except ImportError as exc:  # the window code is missing from this build
        print(
            f"swapless: the desktop app is unavailable ({exc}); starting the terminal chat.",
            file=sys.stderr,
        )
        return main(["chat", *argv])
    if model is not None:
        folder = Path(model).expanduser()
        if not folder.is_dir():
            return _fail(f"--model {model}: no such folder")
        return run_app(_without_option(argv, "--model"), model=folder.resolve())
    return run_app(argv)


def _without_option(argv: list[str], option: str) -> list[str]:
    """``argv`` without ``option VALUE`` / ``option=VALUE`` (what is left goes to Qt)."""
    kept, words = [], iter(argv)
    for word in words:
        if word == option:
            next(words, None)
        elif not word.startswith(f"{option}="):
            kept.append(word)
    return kept


def _window_blocker() -> str | None:
    """Why Qt would abort instead of opening the window (missing xcb libraries), if so."""
    try:
        from app.ui.platform_libs import window_blocker
    except ImportError:  # the window code is missing from this build
        return None
    return window_blocker()


def _has_display() -> bool:
    """Return False on Linux/BSD when no X11/Wayland display (or Qt platform) is set."""
    if sys.platform in ("darwin", "win32"):
        return True
    return any(
        os.environ.get(name)
        for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")
    )


def main_gui() -> int:
    """Entry point of the double-clickable app."""
    return main([])
