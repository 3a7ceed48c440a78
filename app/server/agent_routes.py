"""The routes agents use besides Chat Completions: Anthropic Messages, OpenAI Responses
and the plain-text Completions, on the same service, guards and limits.

Each route parses its protocol into the neutral `ChatRequest` (or a raw prompt), runs it
on a worker through `ServerApp.begin`, and writes the service's events back in its
protocol's shape; a stream sends its protocol's keep-alive whenever nothing else was
sent for `KEEPALIVE_S` (a long prefill), and stops the generation within a token when
its client leaves. Errors use each protocol's own shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from app.server.admission import busy_headers
from app.server.anthropic_messages import messages_response as anthropic
from app.server.anthropic_messages.messages_request import parse_messages_request
from app.server.bridge import GONE, TICK, Bridge, Failed
from app.server.completions import text_completion
from app.server.errors import RequestError, as_request_error
from app.server.events import Accepted, Finished, TextDelta
from app.server.openai_chat import openai_response as openai
from app.server.openai_chat.openai_request import ChatRequest
from app.server.openai_responses import responses_response as responses
from app.server.openai_responses.responses_request import parse_responses_request
from app.server.service.completion import CompletionService

logger = logging.getLogger(__name__)
# Agents' HTTP clients give up on a socket silent for a minute or so; Anthropic pings.
KEEPALIVE_S = 15.0
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

ErrorShape = Callable[[RequestError | None], Response]


class _HasChat(Protocol):
    """A parsed protocol request: the neutral chat request it carries."""

    @property
    def chat(self) -> ChatRequest: ...


_ParsedT = TypeVar("_ParsedT", bound=_HasChat)


class ServerApp(Protocol):
    """What the routes use of `app.server.http_app.ServerApp` (which imports this)."""

    service: CompletionService

    def guard(self, request: Request) -> tuple[RequestError, dict | None] | None: ...

    async def body(self, request: Request) -> bytes: ...

    def admit(self, request: Request, parsed: object, body_bytes: int) -> None: ...

    async def begin(
        self,
        request: Request,
        run: Callable[[Any], Any],
        errors: ErrorShape,
    ) -> Any: ...


def anthropic_error(
    error: RequestError | None, headers: dict | None = None
) -> Response:
    """An Anthropic error response."""
    status = error.status if error is not None else 500
    return JSONResponse(
        anthropic.error_body(error), status_code=status, headers=headers
    )


def openai_error(error: RequestError | None, headers: dict | None = None) -> Response:
    """An OpenAI error response."""
    status = error.status if error is not None else 500
    return JSONResponse(openai.error_body(error), status_code=status, headers=headers)


async def events(bridge: Bridge, first: Any, interval: float) -> AsyncIterator[Any]:
    """The service's events up to `Finished`, a `Failed`, or the client leaving
    (`GONE`), with `TICK` after each quiet ``interval``; cancels the generation when
    the consumer stops (a disconnect cancels the streaming response)."""
    item = first
    try:
        while True:
            yield item
            if item is GONE or isinstance(item, Finished | Failed):
                return
            item = await bridge.next_item(interval)
    finally:
        bridge.cancel.cancel()


def known_error(failed: Failed) -> RequestError | None:
    """The error a failure is answered with (None: a bug, logged here)."""
    known = as_request_error(failed.error)
    if known is None:
        logger.error("request failed", exc_info=failed.error)
    return known


class AgentRoutes:
    """The agent protocols' routes of one `ServerApp`.

    Args:
        server: The application (guards, body limits, workers, service).
    """

    def __init__(self, server: ServerApp):
        self.server = server
        self.keepalive_s = KEEPALIVE_S

    def routes(self) -> list[Route]:
        """The routes to register."""
        return [
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
        ]

    async def _read(self, request: Request, errors: ErrorShape) -> bytes | Response:
        refused = self.server.guard(request)
        if refused is not None:
            error, headers = refused
            response = errors(error)
            if headers:
                response.headers.update(headers)
            return response
        try:
            return await self.server.body(request)
        except RequestError as exc:
            return busy_headers(errors(exc), exc)
        except ClientDisconnect:
            return Response(status_code=400)

    def _model(self, asked: str) -> str:
        return self.server.service.model_id() or asked

    async def _begin_chat(
        self,
        request: Request,
        parse: Callable[[bytes], _ParsedT],
        errors: ErrorShape,
    ) -> Response | tuple[_ParsedT, tuple[Any, Any, Any]]:
        """Read, parse and start a chat request of one protocol on a worker.

        Returns:
            The protocol's error response when it was refused or ended before its
            first event, else the parsed request and what `ServerApp.begin` returned.
        """
        body = await self._read(request, errors)
        if isinstance(body, Response):
            return body
        try:
            parsed = parse(body)
            self.server.admit(request, parsed.chat, len(body))
        except RequestError as exc:
            return busy_headers(errors(exc), exc)
        del body  # the parsed messages are what waits
        chat = parsed.chat
        service = self.server.service
        started = await self.server.begin(
            request, lambda cancel: service.run(chat, cancel), errors
        )
        if isinstance(started, Response):
            return started
        return parsed, started

    # -- Anthropic Messages ----------------------------------------------------------

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages`` (``?beta=true`` too), streamed or not."""
        begun = await self._begin_chat(request, parse_messages_request, anthropic_error)
        if isinstance(begun, Response):
            return begun
        parsed, (bridge, first, watcher) = begun
        model = self._model(parsed.chat.model)
        if parsed.stream:
            watcher.cancel()  # the streaming response listens for it from now on
            return StreamingResponse(
                self._anthropic_stream(bridge, first, model),
                media_type="text/event-stream",
                headers=SSE_HEADERS,
            )
        try:
            reasoning: list[str] = []
            async for item in events(bridge, first, self.keepalive_s):
                if item is GONE:
                    return Response(status_code=400)
                if isinstance(item, Failed):
                    return anthropic_error(known_error(item))
                if isinstance(item, TextDelta) and item.channel == "reasoning":
                    reasoning.append(item.text)
                if isinstance(item, Finished):
                    return JSONResponse(
                        anthropic.message(
                            item,
                            "".join(reasoning),
                            model=model,
                            ident=anthropic.message_id(),
                        )
                    )
            return anthropic_error(None)
        finally:
            watcher.cancel()

    async def _anthropic_stream(self, bridge: Bridge, first: Any, model: str):
        writer = anthropic.MessageStream(model)
        started = False
        async for item in events(bridge, first, self.keepalive_s):
            if not started:
                started = True
                prompt = item.prompt_tokens if isinstance(item, Accepted) else 0
                yield writer.start(Accepted(prompt))
            if item is TICK:
                yield anthropic.PING
            elif isinstance(item, Failed):
                yield writer.error(known_error(item))
            elif isinstance(item, Finished):
                yield writer.finish(item)
            elif item is not GONE:
                chunk = writer.event(item)
                if chunk:
                    yield chunk

    async def count_tokens(self, request: Request) -> Response:
        """``POST /v1/messages/count_tokens``: the prompt's tokens, nothing run."""
        body = await self._read(request, anthropic_error)
        if isinstance(body, Response):
            return body
        try:
            parsed = parse_messages_request(body, count_only=True)
            service = self.server.service
            if service.engine.model_info is None:
                raise RequestError(
                    "No model is loaded; load one in Swapless first.",
                    status=503,
                    code="model_not_loaded",
                )
            tokens = service.prompt_tokens(parsed.chat)
        except RequestError as exc:
            return anthropic_error(exc)
        return JSONResponse({"input_tokens": tokens})

    # -- OpenAI Responses ------------------------------------------------------------

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``, stateless, streamed or not."""
        begun = await self._begin_chat(request, parse_responses_request, openai_error)
        if isinstance(begun, Response):
            return begun
        parsed, (bridge, first, watcher) = begun
        writer = responses.ResponseStream(
            self._model(parsed.chat.model), parsed, time.time()
        )
        if parsed.stream:
            watcher.cancel()
            return StreamingResponse(
                self._responses_stream(bridge, first, writer),
                media_type="text/event-stream",
                headers=SSE_HEADERS,
            )
        try:
            async for item in events(bridge, first, self.keepalive_s):
                if item is GONE:
                    return Response(status_code=400)
                if isinstance(item, Failed):
                    return openai_error(known_error(item))
                writer.event(item)
                if isinstance(item, Finished):
                    writer.finish(item)
                    return JSONResponse(writer.response_object())
            return openai_error(None)
        finally:
            watcher.cancel()

    async def _responses_stream(self, bridge: Bridge, first: Any, writer):
        yield writer.opening()
        async for item in events(bridge, first, self.keepalive_s):
            if item is TICK:
                yield responses.KEEPALIVE
            elif isinstance(item, Failed):
                yield writer.failed(known_error(item))
            elif isinstance(item, Finished):
                yield writer.finish(item)
            elif item is not GONE:
                chunk = writer.event(item)
                if chunk:
                    yield chunk

    # -- Completions -----------------------------------------------------------------

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``: a prompt continued, streamed or not."""
        body = await self._read(request, openai_error)
        if isinstance(body, Response):
            return body
        service = self.server.service
        try:
            parsed = text_completion.parse_completion_request(body)
            run = text_completion.runner(service, parsed)
            self.server.admit(request, parsed, len(body))
        except RequestError as exc:
            return busy_headers(openai_error(exc), exc)
        del body
        started = await self.server.begin(request, run, openai_error)
        if isinstance(started, Response):
            return started
        bridge, first, watcher = started
        writer = text_completion.CompletionWriter(self._model(parsed.model))
        if parsed.stream:
            watcher.cancel()
            return StreamingResponse(
                self._completion_stream(bridge, first, writer),
                media_type="text/event-stream",
                headers=SSE_HEADERS,
            )
        try:
            async for item in events(bridge, first, self.keepalive_s):
                if item is GONE:
                    return Response(status_code=400)
                if isinstance(item, Failed):
                    return openai_error(known_error(item))
                if isinstance(item, Finished):
                    return JSONResponse(writer.whole(item))
            return openai_error(None)
        finally:
            watcher.cancel()

    async def _completion_stream(self, bridge: Bridge, first: Any, writer):
        async for item in events(bridge, first, self.keepalive_s):
            if item is TICK:
                yield b": keep-alive\n\n"
            elif isinstance(item, Failed):
                yield openai.sse(openai.error_body(known_error(item))) + openai.DONE
            elif isinstance(item, Finished):
                yield writer.finish(item)
            elif isinstance(item, TextDelta) and item.channel == "answer":
                yield writer.text(item.text)
