"""The HTTP face of the server: Starlette routes, guards, and the bridge to the engine.

Why Starlette on uvicorn: both are maintained by the same team (Encode) and are what
FastAPI runs on; Starlette is a small library rather than a framework, has the
streaming response and CORS middleware this needs, and tells a streaming response when
its client disconnects, which is how a generation is stopped within a token. uvicorn
runs it on one asyncio loop in a thread of our own (`LocalServer`), so the app's window
and the engine thread are never blocked by the network.

Each chat request runs on a worker thread (the engine API blocks); its events reach the
loop through a `_Bridge` queue. Every answer that is not a reply is an OpenAI error
object with a clear message, never a traceback.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.cancel import CancelToken
from app.core.turn.parts import ToolCallDelta, ToolCallStarted
from app.server.admission import (
    Admission,
    ReleaseTickets,
    busy_headers,
    kv_need,
    memory_room,
    parsed_bytes,
    read_counted,
    ticket_of,
)
from app.server.agent_routes import AgentRoutes
from app.server.bridge import GONE as _GONE
from app.server.bridge import Bridge as _Bridge
from app.server.bridge import Failed as _Failed
from app.server.bridge import Pending as _Pending
from app.server.config import ServerConfig, is_loopback
from app.server.errors import RequestError, ServiceUnavailable, as_request_error
from app.server.events import Finished, TextDelta
from app.server.openai_chat.openai_request import parse_chat_request
from app.server.openai_chat.openai_response import (
    ChunkWriter,
    completion,
    completion_id,
    error_body,
    model_object,
    models_list,
)
from app.server.service.completion import CompletionService
from app.server.service.history_trim import tokenize_need

logger = logging.getLogger(__name__)
STARTED = int(time.time())
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def error_response(
    error: RequestError | None, headers: Mapping[str, str] | None = None
) -> Response:
    """An OpenAI error object with its status (None: a bug, 500)."""
    status = error.status if error is not None else 500
    return JSONResponse(error_body(error), status_code=status, headers=headers)


def log_refusal(error: RequestError) -> RequestError:
    """Log a refusal made at the HTTP edge (the service logs its own); return it.

    Every refusal is logged once, whichever check made it: the guard (key, host,
    size), the body, the queue, or the service (the model name, the context).
    """
    logger.info("request refused (%d): %s", error.status, error)
    return error


def _host_allowed(host_header: str, bound_host: str) -> bool:
    """True when a Host header names this machine (no DNS rebinding through it)."""
    if not host_header:
        return True
    host = host_header.strip()
    if host.startswith("["):
        host = host[1 : host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    return is_loopback(host) or host.lower() == bound_host.lower()


class ServerApp:
    """The Starlette application of one server.

    Args:
        service: Answers chat completions.
        config: Limits, key and CORS origins.
    """

    def __init__(self, service: CompletionService, config: ServerConfig):
        self.service = service
        self.config = config
        self.pending = _Pending(config.max_pending)
        # What queued requests hold and will need, against the memory budget's room.
        self.admission = Admission(
            lambda: memory_room(service.engine, service.index.branch_bytes)
        )
        self.workers = ThreadPoolExecutor(
            max_workers=config.max_pending, thread_name_prefix="swapless-server"
        )
        # Anthropic Messages, OpenAI Responses and Completions.
        self.agent = AgentRoutes(self)
        middleware = [Middleware(ReleaseTickets, admission=self.admission)]
        if config.cors_origins:
            middleware.append(
                Middleware(
                    CORSMiddleware,
                    allow_origins=list(config.cors_origins),
                    allow_methods=["GET", "POST", "OPTIONS"],
                    allow_headers=[
                        "Authorization",
                        "Content-Type",
                        "X-Api-Key",
                        "Anthropic-Version",
                    ],
                )
            )
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/models/{model_id:path}", self.model, methods=["GET"]),
                Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
                Route("/health", self.health, methods=["GET"]),
                *self.agent.routes(),
            ],
            middleware=middleware,
            exception_handlers={
                HTTPException: self._http_error,
                Exception: self._bug,
            },
        )

    def close(self) -> None:
        """Stop every request in progress and the worker threads."""
        self.service.cancel_all()
        self.workers.shutdown(wait=False, cancel_futures=True)

    # -- guards ----------------------------------------------------------------------

    def _refusal(self, request: Request) -> Response | None:
        refused = self.guard(request)
        if refused is None:
            return None
        error, headers = refused
        return error_response(log_refusal(error), headers=headers)

    def guard(self, request: Request) -> tuple[RequestError, dict | None] | None:
        """Why a request may not be answered (its host or key), or None.

        The key may come as ``Authorization: Bearer <key>`` or, as Anthropic's
        clients send it, ``x-api-key: <key>``.
        """
        if self.config.loopback and not _host_allowed(
            request.headers.get("host", ""), self.config.host
        ):
            return (
                RequestError(
                    "This server answers only requests addressed to this machine "
                    "(localhost or 127.0.0.1): it does not serve other host names, so "
                    "a web page cannot reach it through DNS rebinding.",
                    status=403,
                    code="host_not_allowed",
                ),
                None,
            )
        key = self.config.api_key
        if key:
            bearer = request.headers.get("authorization", "")
            direct = request.headers.get("x-api-key", "")
            if not (
                hmac.compare_digest(bearer.encode(), f"Bearer {key}".encode())
                or hmac.compare_digest(direct.encode(), key.encode())
            ):
                return (
                    RequestError(
                        "Missing or wrong API key: send the header "
                        "'Authorization: Bearer <key>' (or 'x-api-key: <key>') with "
                        "the key the server was started with.",
                        status=401,
                        code="invalid_api_key",
                        error_type="authentication_error",
                    ),
                    {"WWW-Authenticate": "Bearer"},
                )
        return None

    async def body(self, request: Request) -> bytes:
        """The request's JSON body, within the size limit.

        Raises:
            RequestError: Not JSON, or too large.
            ClientDisconnect: The client left.
        """
        return await self._body(request)

    async def _body(self, request: Request) -> bytes:
        media_type = request.headers.get("content-type", "").split(";")[0].strip()
        if media_type.lower() != "application/json":
            raise RequestError(
                "Send the body as JSON with the header 'Content-Type: "
                f"application/json' (got {media_type or 'none'!r}).",
                status=415,
                code="unsupported_media_type",
            )
        limit = self.config.max_body_bytes
        too_large = RequestError(
            f"The request body is larger than this server's limit of {limit:,} bytes.",
            status=413,
            code="request_too_large",
        )
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        return await read_counted(request, limit, too_large, self.admission)

    def admit(self, request: Request, parsed: object, body_bytes: int) -> None:
        """Count a parsed request's memory (body, messages, prompt KV) while it waits.

        Raises:
            ServiceUnavailable: It does not fit beside the requests already waiting.
        """
        ticket = ticket_of(request.scope)
        if ticket is None:
            return
        service = self.service
        need = (
            body_bytes
            + parsed_bytes(parsed, body_bytes)
            + kv_need(
                service.engine, service.preset, service.effective_limit(), body_bytes
            )
            # What rendering and counting its history may hold on its worker
            # thread before its first event (bounded by `history_trim`).
            + tokenize_need(service.effective_limit(), body_bytes)
        )
        self.admission.charge(ticket, need)

    # -- routes ----------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: the loaded model, if any."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        return JSONResponse(models_list(self.service.model_id(), STARTED))

    async def model(self, request: Request) -> Response:
        """``GET /v1/models/{id}``."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        wanted = request.path_params["model_id"]
        served = self.service.model_id()
        if served is None or wanted != served:
            return error_response(
                RequestError(
                    f"The model {wanted!r} is not served here"
                    + (f"; this server serves {served!r}." if served else "."),
                    status=404,
                    code="model_not_found",
                    param="model",
                )
            )
        return JSONResponse(model_object(served, STARTED))

    async def health(self, request: Request) -> Response:
        """``GET /health``: the served model and the requests in progress."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        return JSONResponse(
            {
                "status": "ok",
                "model": self.service.model_id(),
                "active_requests": self.pending.count,
                "queued_bytes": self.admission.held,
            }
        )

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``, streamed or not."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        try:
            body = await self._body(request)
            chat = parse_chat_request(body)
            self.admit(request, chat, len(body))
            del body  # the parsed messages are what waits
        except RequestError as exc:
            return busy_headers(error_response(log_refusal(exc)), exc)
        except ClientDisconnect:
            return Response(status_code=400)  # nobody is listening
        started = await self.begin(
            request, lambda cancel: self.service.run(chat, cancel), error_response
        )
        if isinstance(started, Response):
            return started
        bridge, first, watcher = started
        try:
            if chat.stream:
                watcher.cancel()  # the streaming response listens for it from now on
                writer = ChunkWriter(self._model_name(chat), chat.include_usage)
                return StreamingResponse(
                    self._stream(bridge, first, writer),
                    media_type="text/event-stream",
                    headers=SSE_HEADERS,
                )
            return await self._collect(bridge, first, self._model_name(chat))
        finally:
            watcher.cancel()

    # -- answering -------------------------------------------------------------------

    def _model_name(self, chat) -> str:
        """The served model's id (also when the client used the alias)."""
        return self.service.model_id() or chat.model

    async def begin(
        self,
        request: Request,
        run: Callable[[CancelToken], Iterator],
        errors: Callable[[RequestError | None], Response],
    ) -> Response | tuple[_Bridge, object, asyncio.Future]:
        """Queue ``run`` on a worker and wait for its first event.

        Returns:
            A response when it ended before answering (refused, failed, client
            gone; shaped by ``errors``), else the bridge, the first event and the
            disconnect watcher (the caller cancels it once a stream has started or
            the reply is collected).
        """
        if not self.pending.enter():
            return errors(
                log_refusal(
                    RequestError(
                        f"{self.pending.limit} requests are already queued or running on "
                        "the model; retry later.",
                        status=429,
                        code="too_many_requests",
                        error_type="rate_limit_error",
                    )
                )
            )
        bridge = _Bridge(asyncio.get_running_loop())
        try:
            self.workers.submit(self._work, run, bridge)
        except RuntimeError:  # the worker pool was shut down
            self.pending.leave()
            return errors(
                log_refusal(
                    ServiceUnavailable("The server is stopping.", "shutting_down")
                )
            )
        watcher = asyncio.ensure_future(self._watch_disconnect(request, bridge))
        first = await bridge.get()
        # Started (the engine counts its cache from now on) or ended: no longer queued.
        ticket = ticket_of(request.scope)
        if ticket is not None:
            self.admission.release(ticket)
        if first is _GONE or isinstance(first, _Failed):
            watcher.cancel()
            if first is _GONE:
                return Response(status_code=400)
            assert isinstance(first, _Failed), "the other case of the test above"
            known = as_request_error(first.error)
            if known is None:
                logger.error("request failed", exc_info=first.error)
            return errors(known)
        return bridge, first, watcher

    def _work(self, run: Callable[[CancelToken], Iterator], bridge: _Bridge) -> None:
        """Run one request on this worker thread, handing its events to the loop."""
        finished = False
        try:
            for event in run(bridge.cancel):
                finished = isinstance(event, Finished)
                bridge.put(event)
            if not finished:  # never leave the client waiting
                raise RuntimeError("the request ended without a reply")
        except BaseException as exc:  # travels to the loop, answered there
            bridge.put(_Failed(exc))
        finally:
            self.pending.leave()

    @staticmethod
    async def _watch_disconnect(request: Request, bridge: _Bridge) -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                bridge.cancel.cancel()
                bridge.put_here(_GONE)
                return

    def _failure_response(self, error: BaseException) -> Response:
        known = as_request_error(error)
        if known is None:
            logger.error("chat completion failed", exc_info=error)
        # The service logged its own refusals when the request closed.
        return error_response(known)

    async def _collect(self, bridge: _Bridge, item, model: str) -> Response:
        while not isinstance(item, Finished):
            item = await bridge.get()
            if item is _GONE:
                return Response(status_code=400)
            if isinstance(item, _Failed):
                return self._failure_response(item.error)
        return JSONResponse(
            completion(
                item,
                model=model,
                ident=completion_id(),
                created=int(time.time()),
            )
        )

    async def _stream(self, bridge: _Bridge, item, writer: ChunkWriter):
        try:
            yield writer.role()
            while True:
                if item is _GONE:
                    return
                if isinstance(item, Finished):
                    yield writer.finish(item)
                    return
                if isinstance(item, _Failed):
                    known = as_request_error(item.error)
                    if known is None:
                        logger.error("chat completion failed", exc_info=item.error)
                    yield writer.error(known)
                    return
                if isinstance(item, TextDelta):
                    yield writer.text(
                        item.text + bridge.more_text(item.channel), item.channel
                    )
                elif isinstance(item, ToolCallStarted):
                    yield writer.tool_call_started(item)
                elif isinstance(item, ToolCallDelta):
                    yield writer.tool_call_delta(item)
                item = await bridge.get()
        finally:
            # Reached on a normal end, and when Starlette cancels the stream because
            # the client disconnected: the engine stops after its current token.
            bridge.cancel.cancel()

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException), "registered for HTTPException only"
        messages = {
            404: f"There is no {request.url.path} here; this server has "
            "GET /v1/models, POST /v1/chat/completions, /v1/completions, "
            "/v1/messages, /v1/messages/count_tokens and /v1/responses.",
            405: f"{request.method} is not allowed on {request.url.path}.",
        }
        return error_response(
            RequestError(
                messages.get(exc.status_code, str(exc.detail)),
                status=exc.status_code,
                code="not_found" if exc.status_code == 404 else "method_not_allowed",
            ),
            headers=exc.headers,
        )

    async def _bug(self, request: Request, exc: Exception) -> Response:
        logger.error("request %s failed", request.url.path, exc_info=exc)
        return error_response(None)
