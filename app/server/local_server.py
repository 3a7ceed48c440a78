"""A server instance the app or the CLI starts and stops: its HTTP loop on its own thread.

`LocalServer` takes an existing, loaded `Engine` (the app's own: one model thread, so
server requests queue with the window's chats), binds its socket at once (so a port in
use is reported to the caller, in words), runs uvicorn's asyncio loop on a daemon
thread, and answers `status()` instantly from any thread. Nothing here blocks on the
engine: start and stop return in well under a second even while a reply is generated.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.errors import KnownError, SettingsError
from app.core.presets.presets import Preset
from app.server.config import ServerConfig
from app.server.http_app import ServerApp
from app.server.service.completion import CompletionService

if TYPE_CHECKING:  # imported when the server starts
    import uvicorn

logger = logging.getLogger(__name__)
START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
# Streams still open at shutdown get this long to send their last chunk.
GRACEFUL_SHUTDOWN_S = 2


@dataclass(frozen=True)
class ServerStatus:
    """What the server is doing, for the status beside the gauges and the CLI.

    Attributes:
        state: ``stopped``, ``running`` or ``failed``.
        host: The address it listens on.
        port: The port it listens on (the real one when 0 was asked for).
        model: The model id clients use, or None (no model loaded).
        active_requests: Requests queued or running now.
        requests_total: Requests answered or refused since it started.
        conversations: Client conversations whose caches are in memory.
        effective_limit: Tokens a request may hold (None: no model loaded).
        error: Why it failed, when ``state`` is ``failed``.
    """

    state: str
    host: str
    port: int
    model: str | None = None
    active_requests: int = 0
    requests_total: int = 0
    conversations: int = 0
    effective_limit: int | None = None
    error: str = ""

    @property
    def running(self) -> bool:
        """True while it accepts requests."""
        return self.state == "running"

    @property
    def base_url(self) -> str:
        """What clients set as their base URL (``http://host:port/v1``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"


def probe_pressure(engine) -> Callable[[], str]:
    """A thread-safe memory pressure source built on the app's `MemoryProbe`."""
    from app.core.memory.probe import MemoryProbe

    probe = MemoryProbe(mlx_stats=engine.mlx_memory, kv_bytes=engine.live_kv_bytes)
    lock = threading.Lock()

    def pressure() -> str:
        with lock:  # the probe keeps swap counters between samples
            return probe.sample().pressure.value

    return pressure


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen on ``host:port``.

    Raises:
        SettingsError: The host does not resolve.
        KnownError: The port is taken or not allowed.
    """
    try:
        infos = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except socket.gaierror as exc:
        raise SettingsError(f"cannot listen on {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise KnownError(
                f"Port {port} on {host} is already in use; choose another port "
                "(--port N, or 0 for any free one)."
            ) from None
        raise KnownError(f"Cannot listen on {host}:{port}: {exc.strerror}") from None
    return sock


class LocalServer:
    """An OpenAI-compatible server on an existing engine.

    Args:
        engine: A loaded (or later loaded) `Engine`; its model is the one served.
        config: Where to listen and the settings requests run with.
        pressure: Returns the memory pressure level; by default a `MemoryProbe`.
    """

    def __init__(
        self,
        engine,
        config: ServerConfig,
        *,
        pressure: Callable[[], str] | None = None,
    ):
        self.engine = engine
        self.config = config
        self.service = CompletionService(
            engine, config.preset, pressure or probe_pressure(engine)
        )
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._uvicorn: uvicorn.Server | None = None
        self._app: ServerApp | None = None
        self._socket: socket.socket | None = None
        self._port = config.port
        self._error = ""
        self._previous_idle: int | None = None

    # -- control ---------------------------------------------------------------------

    def start(self) -> ServerStatus:
        """Bind and start serving (returns once it accepts connections).

        Raises:
            KnownError: The port is taken, or the server did not start.
        """
        import uvicorn

        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self.status()
            self._error = ""
            sock = bind_socket(self.config.host, self.config.port)
            self._socket = sock
            self._port = sock.getsockname()[1]
            self._app = ServerApp(self.service, self.config)
            self._uvicorn = uvicorn.Server(
                uvicorn.Config(
                    self._app.app,
                    lifespan="off",
                    log_config=None,
                    access_log=False,
                    http="h11",
                    ws="none",
                    loop="asyncio",
                    server_header=False,
                    timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                )
            )
            self._thread = threading.Thread(
                target=self._serve, name="swapless-server-http", daemon=True
            )
            self._thread.start()
            self._wait_started()
            previous = self.engine.max_idle_caches
            if previous < self.config.max_idle_caches:
                self._previous_idle = previous
                self.engine.set_max_idle_caches(self.config.max_idle_caches)
        logger.debug("serving on %s", self.status().base_url)
        return self.status()

    def _wait_started(self) -> None:
        server, thread = self._uvicorn, self._thread
        assert server is not None and thread is not None, "start() sets both first"
        waited = 0.0
        while not server.started:
            if not thread.is_alive() or waited > START_TIMEOUT_S:
                self._close_socket()
                raise KnownError(
                    f"The server did not start: {self._error or 'timed out'}"
                )
            thread.join(0.01)
            waited += 0.01

    def _serve(self) -> None:
        try:
            server, sock = self._uvicorn, self._socket
            assert server is not None and sock is not None, "start() sets both first"
            asyncio.run(server.serve(sockets=[sock]))
        except BaseException as exc:  # reported through status(), and logged
            self._error = f"{type(exc).__name__}: {exc}"
            logger.exception("the server loop failed")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop serving: running replies stop within a token, then the loop ends."""
        with self._lock:
            thread = self._thread
            if thread is None:
                return
            if self._app is not None:
                self._app.close()
            server = self._uvicorn
            assert server is not None, "set together with the thread"
            server.should_exit = True
            thread.join(timeout)
            if thread.is_alive():
                server.force_exit = True
                thread.join(timeout)
            self._thread = None
            self._close_socket()
            if self._previous_idle is not None:
                self.engine.set_max_idle_caches(self._previous_idle)
                self._previous_idle = None

    def _close_socket(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    # -- state -----------------------------------------------------------------------

    def status(self) -> ServerStatus:
        """What the server is doing now (instant, any thread)."""
        thread = self._thread
        if self._error:
            state = "failed"
        elif thread is not None and thread.is_alive():
            state = "running"
        else:
            state = "stopped"
        service = self.service
        return ServerStatus(
            state=state,
            host=self.config.host,
            port=self._port,
            model=service.model_id(),
            active_requests=service.active_requests,
            requests_total=service.requests_total,
            conversations=service.index.live_conversations(),
            effective_limit=(
                service.effective_limit() if self.engine.model_info else None
            ),
            error=self._error,
        )

    def set_preset(self, preset: Preset) -> None:
        """Run requests that start from now on with ``preset``."""
        self.service.set_preset(preset)

    def forget_conversations(self) -> None:
        """Drop every idle client conversation's cache and trim records."""
        self.service.forget_conversations()
