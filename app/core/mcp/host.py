"""Running tool servers: start when first needed, call with a timeout, stop at quit.

The `mcp` SDK is asynchronous; Swapless's callers (the chat loop on a worker thread, the
CLI) are not. The host owns one event loop on a thread of its own. Each server lives in
one long-lived task that enters the SDK's `Client` context and waits for the stop
signal, so the context is entered and left in the same task (the SDK's cancel scopes
require it) while calls run beside it. Leaving the context is what stops a stdio
server's process tree; `close()` does that for every server and waits, and an `atexit`
hook does it for a host nobody closed. A server killed from outside, one that never
answers, or one that writes garbage is a `ToolServerError` in words — never a crash
and never a hang past the call's timeout.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TextIO, TypeVar

from app.core.errors import ToolServerError
from app.core.files import paths
from app.core.files.private_files import create_private_file
from app.core.mcp.config import ServerConfig
from app.core.turn.parts import ToolResult, ToolSpec

T = TypeVar("T")
DEFAULT_START_TIMEOUT_S = 30.0
DEFAULT_CALL_TIMEOUT_S = 120.0
# How often a waiting caller looks at its cancel check (Stop must feel immediate).
CANCEL_POLL_S = 0.05


@dataclass(frozen=True)
class ServerTool:
    """A tool offered by one server.

    Attributes:
        server: The server's configured name.
        spec: The tool as the model sees it.
    """

    server: str
    spec: ToolSpec


@dataclass(frozen=True)
class CallOutcome:
    """What one call produced, for the tool card and the model.

    Attributes:
        result: The text given back to the model (an error says so in words).
        seconds: Wall time of the call.
    """

    result: ToolResult
    seconds: float


class _Running:
    """One started server: its SDK client and the event that lets its task end."""

    def __init__(self, client: Any, stop: asyncio.Event, task: asyncio.Task[None]):
        self.client = client
        self.stop = stop
        self.task = task
        self.lost: str | None = None


def _result_text(result: Any) -> str:
    """Join a CallToolResult's content into text (non-text parts named, not dropped)."""
    parts: list[str] = []
    for item in getattr(result, "content", None) or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(str(getattr(item, "text", "")))
        elif kind == "resource":
            resource = getattr(item, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(
                str(text) if text is not None else f"[resource {resource!s:.200}]"
            )
        else:
            parts.append(f"[{kind or 'unknown'} content not shown to the model]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


class McpHost:
    """The tool servers of one Swapless process.

    Args:
        servers: The configured servers by name (disabled ones are never started).
        start_timeout_s: Seconds a server may take to start and answer its handshake.
        call_timeout_s: Seconds one tool call may take.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerConfig],
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
    ):
        if start_timeout_s <= 0 or call_timeout_s <= 0:
            raise ValueError("timeouts must be positive")
        self.servers = dict(servers)
        self.start_timeout_s = start_timeout_s
        self.call_timeout_s = call_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="swapless-mcp", daemon=True
        )
        self._thread.start()
        self._running: dict[str, _Running] = {}
        self._starting: dict[str, asyncio.Future[_Running]] = {}
        self._logs: dict[str, TextIO] = {}
        self._keepers: set[asyncio.Task[None]] = set()
        self._closed = False
        self._pid = os.getpid()
        _live_hosts.add(self)

    # -- the caller's side -------------------------------------------------------

    def _run(
        self,
        coro: Coroutine[Any, Any, T],
        timeout_s: float,
        cancelled: Callable[[], bool] | None = None,
        what: str = "the tool server",
    ) -> T:
        if self._closed:
            coro.close()
            raise ToolServerError("the tool servers were stopped")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                future.cancel()
                raise ToolServerError(f"{what} did not answer within {timeout_s:g} s")
            try:
                return future.result(timeout=min(CANCEL_POLL_S, remaining))
            except TimeoutError:
                if cancelled is not None and cancelled():
                    future.cancel()
                    raise ToolServerError(f"{what}: stopped") from None

    def start(self, name: str) -> None:
        """Start a server now (it is started on first use otherwise).

        Raises:
            ToolServerError: Unknown, disabled, or it failed to start in time.
        """
        self._run(
            self._ensure(name),
            self.start_timeout_s + 1.0,
            what=f"tool server {name!r}",
        )

    def list_tools(self, name: str) -> list[ServerTool]:
        """Return a server's tools, starting it if needed.

        Raises:
            ToolServerError: The server cannot be started or does not answer.
        """
        return self._run(
            self._list_tools(name),
            self.start_timeout_s + self.call_timeout_s,
            what=f"tool server {name!r}",
        )

    def call(
        self,
        name: str,
        tool: str,
        arguments: dict[str, Any],
        call_id: str,
        cancelled: Callable[[], bool] | None = None,
    ) -> CallOutcome:
        """Call one tool and return its result as text for the model.

        A tool that reports an error, a server that dies or times out, and a Stop
        all come back as a `ToolResult` with ``is_error`` set and the reason in
        words, so the model (and the card) can say what happened.

        Args:
            name: The server.
            tool: The tool's name on that server.
            arguments: The call's arguments.
            call_id: The model's call id, echoed in the result.
            cancelled: Polled while waiting; True stops the call.
        """
        started = time.monotonic()
        try:
            result = self._run(
                self._call(name, tool, arguments),
                self.start_timeout_s + self.call_timeout_s,
                cancelled,
                what=f"{name}.{tool}",
            )
            text = _result_text(result)
            is_error = bool(getattr(result, "is_error", False))
        except ToolServerError as exc:
            text, is_error = f"The tool could not run: {exc}", True
        return CallOutcome(
            ToolResult(call_id=call_id, name=tool, content=text, is_error=is_error),
            time.monotonic() - started,
        )

    def running(self) -> list[str]:
        """Names of the servers started and still running."""
        return sorted(n for n, r in self._running.items() if r.lost is None)

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop every server and the host's thread (idempotent)."""
        if self._closed:
            return
        self._closed = True
        _live_hosts.discard(self)
        if os.getpid() != self._pid:  # a forked child must not stop its parent's
            return
        future = asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop)
        with contextlib.suppress(Exception):
            future.result(timeout=timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=timeout_s)
        if not self._thread.is_alive():
            self._loop.close()
        for log in self._logs.values():
            log.close()

    def __enter__(self) -> McpHost:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop's side -----------------------------------------------------------

    def _config(self, name: str) -> ServerConfig:
        server = self.servers.get(name)
        if server is None:
            known = ", ".join(sorted(self.servers)) or "none"
            raise ToolServerError(
                f"no tool server named {name!r} (configured: {known})"
            )
        if server.disabled:
            raise ToolServerError(f"tool server {name!r} is disabled")
        return server

    def _client_for(self, server: ServerConfig) -> Any:
        from mcp import Client, StdioServerParameters

        if server.url:
            if server.headers:
                import httpx2

                http = httpx2.AsyncClient(headers=dict(server.headers), timeout=30.0)
                from mcp.client.streamable_http import streamable_http_client

                return Client(streamable_http_client(server.url, http_client=http))
            return Client(server.url)
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) or None,
            cwd=server.cwd,
        )
        # The server's stderr goes to a private log of its own, not into the chat's
        # terminal (a traceback there would look like Swapless's).
        return Client(stdio_client(params, errlog=self._errlog(server.name)))

    def _errlog(self, name: str) -> TextIO:
        if name not in self._logs:
            path = paths.logs_dir() / f"mcp-{name}.log"
            create_private_file(path)
            self._logs[name] = path.open("a", encoding="utf-8")
        return self._logs[name]

    async def _ensure(self, name: str) -> _Running:
        running = self._running.get(name)
        if running is not None and running.lost is None and not running.task.done():
            return running
        pending = self._starting.get(name)
        if pending is None:
            pending = self._loop.create_future()
            self._starting[name] = pending
            self._loop.create_task(self._keep(name, pending))
        try:
            return await asyncio.wait_for(asyncio.shield(pending), self.start_timeout_s)
        except TimeoutError:
            raise ToolServerError(
                f"tool server {name!r} did not start within {self.start_timeout_s:g} s"
            ) from None

    async def _keep(self, name: str, ready: asyncio.Future[_Running]) -> None:
        """The server's task: enter the SDK client, wait for stop, leave it."""
        stop = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None  # always inside a task here
        running: _Running | None = None
        self._keepers.add(task)
        try:
            server = self._config(name)
            async with self._client_for(server) as client:
                running = _Running(client, stop, task)
                self._running[name] = running
                ready.set_result(running)
                # Started: later callers find it in _running, and once it is retired a
                # new start must not be handed this (then dead) one.
                if self._starting.get(name) is ready:
                    del self._starting[name]
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - every failure becomes words
            reason = exc if isinstance(exc, ToolServerError) else None
            words = str(reason) if reason else _describe_failure(name, exc)
            if not ready.done():
                ready.set_exception(ToolServerError(words))
            if running is not None:
                running.lost = words
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._keepers.discard(task)
            if self._starting.get(name) is ready:
                del self._starting[name]
            if running is not None and running.lost is None:
                running.lost = f"tool server {name!r} stopped"

    async def _list_tools(self, name: str) -> list[ServerTool]:
        running = await self._ensure(name)
        try:
            listing = await asyncio.wait_for(
                running.client.list_tools(), self.call_timeout_s
            )
        except TimeoutError:
            raise ToolServerError(
                f"tool server {name!r} did not list its tools within "
                f"{self.call_timeout_s:g} s"
            ) from None
        except Exception as exc:
            raise ToolServerError(_describe_failure(name, exc)) from None
        return [
            ServerTool(
                name,
                ToolSpec(
                    name=tool.name,
                    description=tool.description or "",
                    parameters=dict(tool.input_schema or {}),
                ),
            )
            for tool in listing.tools
        ]

    async def _call(self, name: str, tool: str, arguments: dict[str, Any]) -> Any:
        reused = name in self._running and self._running[name].lost is None
        try:
            return await self._call_once(name, tool, arguments)
        except ToolServerError as exc:
            # A server that died after its last call is only found dead now: start it
            # anew once, unless the failure was this call's own (a timeout).
            if not reused or "did not answer" in str(exc):
                raise
            return await self._call_once(name, tool, arguments)

    async def _call_once(self, name: str, tool: str, arguments: dict[str, Any]) -> Any:
        running = await self._ensure(name)
        call = asyncio.ensure_future(running.client.call_tool(tool, arguments))
        # A server that dies mid-call ends its keeper task: stop waiting then too.
        done, _ = await asyncio.wait(
            {call, running.task},
            timeout=self.call_timeout_s,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if call in done:
            try:
                return call.result()
            except Exception as exc:
                # The connection is gone (the process died, the stream broke): retire
                # this client so the next call starts the server anew.
                words = _describe_failure(name, exc)
                self._retire(name, running, words)
                raise ToolServerError(words) from None
        call.cancel()
        if running.task in done:
            raise ToolServerError(
                running.lost or f"tool server {name!r} exited during the call"
            )
        raise ToolServerError(
            f"{name}.{tool} did not answer within {self.call_timeout_s:g} s"
        )

    def _retire(self, name: str, running: _Running, words: str) -> None:
        running.lost = running.lost or words
        running.stop.set()
        if self._running.get(name) is running:
            del self._running[name]

    async def _stop_all(self) -> None:
        for running in list(self._running.values()):
            running.stop.set()
        tasks = [task for task in self._keepers if not task.done()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=8.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)


def _describe_failure(name: str, exc: BaseException) -> str:
    """One line for a failure the SDK raised (it may be a group of several)."""
    inner: BaseException = exc
    while isinstance(inner, BaseExceptionGroup) and inner.exceptions:
        inner = inner.exceptions[0]
    if isinstance(inner, FileNotFoundError):
        return f"tool server {name!r} could not start: command not found"
    if isinstance(inner, asyncio.CancelledError):
        return f"tool server {name!r} stopped"
    text = str(inner).strip().splitlines()[0] if str(inner).strip() else ""
    kind = type(inner).__name__
    return f"tool server {name!r} failed: {text or kind}"[:300]


_live_hosts: weakref.WeakSet[McpHost] = weakref.WeakSet()


@atexit.register
def _close_live_hosts() -> None:
    # A host nobody closed must not leave its servers running after Swapless quits.
    for host in list(_live_hosts):
        with contextlib.suppress(Exception):
            host.close(timeout_s=5.0)
