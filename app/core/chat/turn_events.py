"""What a chat turn reports, in order, as frozen values: the one streaming shape of chat.

Every consumer (the CLI chat, the Qt worker, the local server) loops over the same
events with one cancel token, the way long-document runs already stream theirs. Besides
these, a turn yields the engine's own `PrefillProgress` and `GenerationEvent` (a text
chunk) events unchanged.

Order: optionally `TrimStarted` then `Trimmed` (up to three rounds), then
optionally `Recalled`, then
`PrefillProgress`* and `GenerationEvent`* from the engine, then `TurnFinished`. With
tools offered, a reply that calls tools is followed by `ToolRunStarted` /
`ToolRunFinished` per call (and `ToolNotice` for what went wrong around them), then
the next reply's engine events, until a reply calls none.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from app.core.cancel import CancelToken
from app.core.chat.trimmer import TrimOutcome
from app.core.chat.turn_report import TurnReport
from app.core.store.calls.tool_calls import StoredToolCall
from app.core.store.records import RecalledMessage


@dataclass(frozen=True)
class TrimStarted:
    """The conversation is being trimmed before the reply (a summary is being written).

    Attributes:
        dropped_messages: Messages the trim replaces with a summary.
        reason: Why, in words with the numbers.
    """

    dropped_messages: int
    reason: str


@dataclass(frozen=True)
class Trimmed:
    """A trim finished: the summary is stored and the cache holds the trimmed context.

    Attributes:
        outcome: What the trim did.
    """

    outcome: TrimOutcome


@dataclass(frozen=True)
class Recalled:
    """Trimmed originals were put back, word for word, before the new message.

    Attributes:
        messages: The recalled messages, oldest first.
        cut: Whether one was cut at a sentence to fit the recall budget.
        ms: Time the recall took.
    """

    messages: tuple[RecalledMessage, ...]
    cut: bool
    ms: float


@dataclass(frozen=True)
class ToolRunStarted:
    """A tool call the model made is about to run (or to be asked about).

    Attributes:
        call_id: The model's id for the call.
        server: The server that would run it (empty: no server offers the tool).
        tool: The tool's name as the model called it.
        arguments: The arguments as JSON text.
        needs_consent: The user is being asked before it runs.
        command: The server's full command or URL (shown before its first start).
    """

    call_id: str
    server: str
    tool: str
    arguments: str
    needs_consent: bool
    command: str = ""


@dataclass(frozen=True)
class ToolRunFinished:
    """A tool call ended (ran, failed, was stopped or denied) and is stored.

    Attributes:
        call: The stored call with the result given to the model.
    """

    call: StoredToolCall


@dataclass(frozen=True)
class ToolNotice:
    """Something about the tools the user should read (a server that failed, the cap).

    Attributes:
        text: One line in words.
    """

    text: str


@dataclass(frozen=True)
class TurnFinished:
    """The reply is complete (or stopped) and stored.

    Attributes:
        report: Everything measured about the turn.
    """

    report: TurnReport


class ChatTurn:
    """One turn's events, produced as they are iterated (once).

    Args:
        events: The turn's event generator.
        cancel: The token that stops it.
    """

    def __init__(self, events: Iterator, cancel: CancelToken):
        self._events = events
        self.cancel_token = cancel
        self.report: TurnReport | None = None

    def __iter__(self) -> Iterator:
        try:
            for event in self._events:
                if isinstance(event, TurnFinished):
                    self.report = event.report
                yield event
        finally:
            # A consumer that stops early closes the turn now, not whenever the
            # garbage collector gets to it: the reply is saved and the engine stops.
            close = getattr(self._events, "close", None)
            if close is not None:
                close()

    def cancel(self) -> None:
        """Stop the turn soon (any thread): the reply stops after its current token."""
        self.cancel_token.cancel()

    def wait(self) -> TurnReport:
        """Run the turn to its end and return its report.

        Raises:
            BudgetError: The request cannot fit (nothing is saved then).
        """
        for _ in self:
            pass
        if self.report is None:
            raise RuntimeError("the turn ended without a report")
        return self.report
