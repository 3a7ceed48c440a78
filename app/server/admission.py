"""Memory admission of queued requests: what waits for the model is counted too.

The model has one thread, so requests wait their turn with their bodies read and
parsed: 32 bodies of 8 MiB each, with their parsed messages, are gigabytes the engine's
budget never saw (issue #31, point 15). Each request therefore holds a `Ticket` in the
`Admission` ledger from the moment its body starts to arrive:

* while the body is read: its declared ``Content-Length`` (else the bytes read so far),
  checked before another chunk is read;
* once parsed: the body, the parsed messages' strings (measured with
  ``sys.getsizeof``) and the KV cache its prompt will need, at the loaded model's
  bytes per token, for at most the request's limit (the body's length bounds its
  prompt tokens: a byte-level tokenizer gives at most one token per UTF-8 byte, and
  JSON holds every text at least as long as its UTF-8).

The tickets together must fit the room the memory budget leaves (`memory_room`); a
request that would not is refused at once with 503 ``memory_pressure`` and a
``Retry-After``, before more is read. A ticket is released when its request starts
(its first event: from then on the engine counts its cache) or ends in any way
(`ReleaseTickets`, an ASGI wrapper, releases whatever a request left).

Imports: `app.core` budget helpers and the server's own errors and request types.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.core.budget.memory_budget import memory_budget_bytes
from app.server.errors import RequestError, ServiceUnavailable
from app.server.openai_chat.openai_request import ChatRequest

SCOPE_KEY = "swapless.admission"
"""Where a request's ticket is kept in its ASGI scope."""
RETRY_AFTER_S = 2
"""Seconds a refused client is told to wait: about one short reply on a small model."""
# A bound for parsed text the request type does not expose (a text completion's
# prompt): a Python str holds at most 4 bytes per character, and a JSON body at least
# one byte per character.
UNMEASURED_TEXT_FACTOR = 4
MESSAGE_OVERHEAD = 256
"""Bytes of a parsed message besides its strings (the object, its tuple slots)."""


@dataclass
class Ticket:
    """One request's share of the ledger.

    Attributes:
        held: Bytes counted for it now.
        released: True once it no longer counts.
    """

    held: int = 0
    released: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class Admission:
    """The ledger of what queued requests hold and will need, against a room.

    Args:
        room: Bytes the memory budget leaves for waiting requests now (None: no
            budget is known, nothing is refused for memory).
    """

    def __init__(self, room: Callable[[], int | None]):
        self.room = room
        self.held = 0
        self.refused = 0
        self._lock = threading.Lock()

    def open(self) -> Ticket:
        """A new, empty ticket."""
        return Ticket()

    def charge(self, ticket: Ticket, total: int) -> None:
        """Count ``total`` bytes for ``ticket`` (its new size, not an increment).

        A smaller size is always taken; a larger one only when the growth fits the
        room beside every other ticket.

        Raises:
            ServiceUnavailable: It does not fit (503 ``memory_pressure``, with the
                numbers); the ticket keeps its previous size.
        """
        with self._lock:
            if ticket.released:
                return
            growth = total - ticket.held
            if growth > 0:
                room = self.room()
                if room is not None and self.held + growth > room:
                    self.refused += 1
                    raise _refusal(total, self.held - ticket.held, room)
            self.held += growth
            ticket.held = total

    def release(self, ticket: Ticket) -> None:
        """Stop counting ``ticket`` (idempotent)."""
        with self._lock:
            if ticket.released:
                return
            ticket.released = True
            self.held -= ticket.held
            ticket.held = 0


def busy_headers(response: Response, error: RequestError) -> Response:
    """Add ``Retry-After`` to a refusal for memory (the client may retry later)."""
    if error.status == 503 and error.code == "memory_pressure":
        response.headers["Retry-After"] = str(RETRY_AFTER_S)
    return response


def ticket_of(scope: Scope) -> Ticket | None:
    """The ticket a request holds, if any."""
    ticket = scope.get(SCOPE_KEY)
    return ticket if isinstance(ticket, Ticket) else None


class ReleaseTickets:
    """ASGI wrapper: whatever way a request ends, its ticket is released.

    Args:
        app: The application.
        admission: The ledger.
    """

    def __init__(self, app: ASGIApp, admission: Admission):
        self.app = app
        self.admission = admission

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the request, then release its ticket."""
        try:
            await self.app(scope, receive, send)
        finally:
            ticket = ticket_of(scope)
            if ticket is not None:
                self.admission.release(ticket)


async def read_counted(
    request: Request, limit: int, too_large: RequestError, admission: Admission
) -> bytes:
    """Read a request's body, counting it in ``admission`` before each chunk is kept.

    Raises:
        RequestError: ``too_large`` past ``limit`` bytes.
        ServiceUnavailable: It does not fit the room (the rest of the body is
            read and dropped first).
        ClientDisconnect: The client left.
    """
    declared = request.headers.get("content-length", "")
    # Counted against the memory budget before it is read (`admission`). A body
    # refused for memory is drained unkept: a client still sending it would
    # otherwise see a reset connection instead of the refusal.
    ticket = admission.open()
    request.scope[SCOPE_KEY] = ticket
    refused: ServiceUnavailable | None = None
    try:
        if declared.isdigit():
            admission.charge(ticket, int(declared))
    except ServiceUnavailable as exc:
        refused = exc
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        if refused is None and size > ticket.held:
            try:
                admission.charge(ticket, size)
            except ServiceUnavailable as exc:
                refused = exc
                admission.release(ticket)
                chunks.clear()
        if refused is None:
            chunks.append(chunk)
    if refused is not None:
        raise refused
    return b"".join(chunks)


def parsed_bytes(parsed: Any, body_bytes: int) -> int:
    """Bytes the parsed request holds: its messages' strings, measured.

    A request that is not a `ChatRequest` (a text completion) is bounded from its
    body's length instead.
    """
    if not isinstance(parsed, ChatRequest):
        return UNMEASURED_TEXT_FACTOR * body_bytes
    total = 0
    for message in parsed.messages:
        total += MESSAGE_OVERHEAD + sys.getsizeof(message.content)
        if message.reasoning_content:
            total += sys.getsizeof(message.reasoning_content)
        for call in message.tool_calls:
            total += MESSAGE_OVERHEAD + sys.getsizeof(call.arguments)
    return total


def kv_need(engine: Any, preset: Any, limit: int, body_bytes: int) -> int:
    """KV bytes the request's prompt will need: at most ``limit`` tokens, and at most
    one token per byte of its body, at the loaded model's bytes per token (0 when no
    budget is known)."""
    budget = getattr(engine, "device_budget", None)
    if budget is None or limit <= 0:
        return 0
    tokens = min(limit, body_bytes)
    try:
        return int(
            budget.kv_bytes(tokens, preset.kv_bits, preset.kv_group, preset.kv_aging)
        )
    except ValueError:  # a precision this model cannot use: refused when it runs
        return 0


def memory_room(engine: Any, client_cache_bytes: Callable[[], int]) -> int | None:
    """Bytes the memory budget leaves for waiting requests (None: no budget).

    The budget (total RAM x cap - reserve) less the weights and the KV caches held
    now, except the server's own client caches: those are evicted, least recently
    used first, when a request needs their room (`ConversationIndex`).
    """
    budget = getattr(engine, "device_budget", None)
    live = getattr(engine, "live_kv_bytes", None)
    if budget is None or live is None:
        return None
    held = max(0, live() - client_cache_bytes())
    total = memory_budget_bytes(budget.total_memory, budget.settings)
    return max(0, total - budget.weights_bytes - held)


def _refusal(need: int, others: int, room: int) -> ServiceUnavailable:
    mib = 2**20
    return ServiceUnavailable(
        f"The server's memory budget has no room for this request now: it needs "
        f"{need / mib:,.1f} MiB (its body, parsed messages and prompt cache) and the "
        f"requests already waiting hold {others / mib:,.1f} MiB of the "
        f"{room / mib:,.1f} MiB left; retry after the queue drains.",
        "memory_pressure",
        {
            "queued_request_bytes": need,
            "queued_bytes": others,
            "queue_room_bytes": room,
        },
    )
