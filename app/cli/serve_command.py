"""`swapless serve`: the OpenAI-compatible local server, headless.

Loads the model on one engine (the demo model without ``--model``), serves it until
Ctrl+C or SIGTERM, and prints one line per request on stderr. Safe by default: it binds
127.0.0.1, and any other host needs an API key, read from a file only its owner can
read (``--api-key-file``) or from ``SWAPLESS_API_KEY``: never from the command line,
which every user of the machine can read in ``/proc/PID/cmdline``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
import sys
import threading
from pathlib import Path

from app.server.config import DEFAULT_HOST, DEFAULT_PORT

API_KEY_VARIABLE = "SWAPLESS_API_KEY"


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    parser = subcommands.add_parser(
        "serve",
        help="serve the model over an OpenAI-compatible HTTP API",
        description="Serve a local mlx-lm model over the OpenAI Chat Completions API "
        "(GET /v1/models, POST /v1/chat/completions), with cache reuse across "
        "requests, auto-trim or refusal at the limit, and the memory budget checked "
        "before every request. Settings not given come from the preset (chat).",
    )
    parser.add_argument(
        "--model", metavar="DIR", help="mlx-lm model folder (default: demo)"
    )
    parser.add_argument(
        "--preset", default="chat", metavar="NAME", help="task preset (chat)"
    )
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind ({DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port, 0 for any ({DEFAULT_PORT})",
    )
    parser.add_argument(
        "--api-key-file",
        metavar="FILE",
        help="require 'Authorization: Bearer KEY', KEY being the first line of FILE "
        f"(mode 0600; or set {API_KEY_VARIABLE}); needed for any host but loopback",
    )
    # Accepted only to be refused in words: a key in the arguments is public.
    parser.add_argument("--api-key", metavar="KEY", help=argparse.SUPPRESS)
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="URL",
        help="let browser pages from this origin call the server (repeatable; none "
        "by default)",
    )
    parser.add_argument(
        "--max-context", type=int, metavar="N", help="trim (or refuse) above N tokens"
    )
    parser.add_argument(
        "--no-auto-trim",
        action="store_true",
        help="refuse over-long requests (HTTP 400) instead of trimming them",
    )
    parser.set_defaults(run=run)


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def server_config(args: argparse.Namespace):
    """The `ServerConfig` of the command line (checked before the model loads)."""
    from app.core.presets.presets import get_preset
    from app.server.config import ServerConfig

    preset = get_preset(args.preset).with_changes(
        max_context=args.max_context,
        auto_trim=False if args.no_auto_trim else None,
    )
    return ServerConfig(
        preset=preset,
        host=args.host,
        port=args.port,
        api_key=api_key(args),
        cors_origins=tuple(args.cors_origin),
    )


MAX_KEY_FILE_BYTES = 4096


def api_key(args: argparse.Namespace) -> str | None:
    """The API key: from ``--api-key-file``, else from the environment, else None.

    Raises:
        SettingsError: The key was given on the command line, or the key file is
            readable by other users, not the caller's, or empty.
    """
    from app.core.errors import SettingsError

    if args.api_key is not None:
        raise SettingsError(
            "--api-key puts the key where every user of this computer can read it "
            "(the process list); write it to a file only you can read and pass "
            f"--api-key-file FILE (chmod 600 FILE), or set {API_KEY_VARIABLE}."
        )
    if args.api_key_file is None:
        return os.environ.get(API_KEY_VARIABLE) or None
    return read_key_file(Path(args.api_key_file))


def read_key_file(path: Path) -> str:
    """Return the key on the first line of ``path``, a file only its owner can read.

    Raises:
        SettingsError: The file is missing, not a regular file, readable or writable
            by others, not the caller's, or holds no key.
    """
    from app.core.errors import SettingsError
    from app.core.files import bounded_read

    try:
        data = bounded_read.read_text(
            path, what="The API key file", max_bytes=MAX_KEY_FILE_BYTES
        )
        info = path.stat()
    except FileNotFoundError:
        raise SettingsError(f"The API key file {path} does not exist.") from None
    except bounded_read.FileReadError as exc:
        raise SettingsError(str(exc)) from None
    if info.st_uid != os.geteuid():
        raise SettingsError(
            f"The API key file {path} belongs to another user; use a file of your own."
        )
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SettingsError(
            f"The API key file {path} can be read by other users (mode "
            f"{stat.S_IMODE(info.st_mode):04o}); run 'chmod 600 {path}'."
        )
    key = data.split("\n", 1)[0].strip()
    if not key:
        raise SettingsError(f"The API key file {path} holds no key on its first line.")
    return key


# SIGTERM or Ctrl+C must end the process within 2 s, even while a request is in a
# long computation that cannot be interrupted (a trim of a huge history).
STOP_GRACE_S = 0.6
ENGINE_GRACE_S = 0.4


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted; leave promptly even if a request's work is stuck."""
    code = _serve(args)
    _leave_if_work_remains(code)
    return code


def _leave_if_work_remains(code: int) -> None:
    """End the process now if request threads still run after the server stopped.

    Their requests were cancelled and their clients answered or disconnected; the
    server keeps nothing that needs saving, so waiting for them (at exit Python
    joins every worker of a thread pool, daemon or not) would only keep a stopped
    server alive: SIGTERM printed "Stopped." and the process never ended.
    """
    others = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.current_thread() and thread.is_alive()
    ]
    if others:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(args: argparse.Namespace) -> int:
    from app.core.engine.engine import Engine
    from app.core.modelkit.demo_model import DEMO_NOTICE
    from app.server.local_server import LocalServer

    config = server_config(args)
    logging.basicConfig(
        level=logging.INFO, format="swapless serve: %(message)s", stream=sys.stderr
    )
    logging.getLogger("uvicorn").setLevel(logging.WARNING)
    engine = Engine.from_settings()
    try:
        if args.model is None:
            _say(DEMO_NOTICE)
            info = engine.load_demo()
        else:
            info = engine.load(args.model)
        server = LocalServer(engine, config)
        status = server.start()
        preset = config.preset
        limit = server.service.effective_limit()
        _say(
            f"Serving {status.model} ({info.folder}) at {status.base_url} — preset "
            f"{preset.name}: limit {limit} tokens, {preset.kv_bits}-bit KV, auto-trim "
            f"{'on' if preset.auto_trim else 'off'}"
            + ("" if config.api_key is None else ", API key required")
            + ". Ctrl+C stops."
        )
        stopping = threading.Event()
        previous = {
            sig: signal.signal(sig, lambda *_: stopping.set())
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            while not stopping.wait(0.5):
                if not server.status().running:
                    _say(
                        f"swapless: error: the server stopped: {server.status().error}"
                    )
                    return 2
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            # Requests still running are cancelled now; uvicorn would log each one's
            # cancellation as a traceback.
            logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
            server.stop(timeout=STOP_GRACE_S)
        _say("Stopped.")
        return 0
    finally:
        engine.shutdown(timeout=ENGINE_GRACE_S)
