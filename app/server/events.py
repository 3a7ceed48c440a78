"""What answering one request yields, in order, as frozen values.

`Accepted` comes first once the request is known to fit (its HTTP response may start),
then `TrimApplied` when its history was summarised, `TextDelta`s of the reply (stop
sequences already cut; each says its channel) and the tool-call events of
`app.core.turn.parts` as the model makes calls, and `Finished` with the numbers. A refusal is raised before
`Accepted`, so it can still be answered with an HTTP error status.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.core.chat.trimmer import TrimOutcome
from app.core.turn.parts import ANSWER, Channel, ToolCall


@dataclass(frozen=True)
class Accepted:
    """The request fits and is being answered.

    Attributes:
        prompt_tokens: Tokens of the prompt the model sees (before any trim).
    """

    prompt_tokens: int


@dataclass(frozen=True)
class TrimApplied:
    """The oldest messages were replaced by a summary, in the cache too.

    Attributes:
        outcome: What the trim did.
        reason: Why, with the numbers.
    """

    outcome: TrimOutcome
    reason: str


@dataclass(frozen=True)
class TextDelta:
    """Reply text to send now.

    Attributes:
        text: The new text.
        channel: ``answer``, or ``reasoning`` for the model's thoughts.
    """

    text: str
    channel: Channel = ANSWER


@dataclass(frozen=True)
class Finished:
    """The reply is complete, stopped at a stop sequence, or cancelled.

    Attributes:
        text: The whole reply (without any stop sequence).
        finish_reason: ``stop``, ``length``, ``tool_calls`` or ``cancelled`` (the
            client left).
        prompt_tokens: Tokens of the prompt the model saw.
        completion_tokens: Tokens generated.
        cached_tokens: Prompt tokens whose KV came from a cache.
        swapless: The ``swapless`` extension object of the response.
        key: The engine cache key it ran on (not sent to the client).
        tool_calls: The calls the reply made (its finish reason is then
            ``tool_calls``).
        stop_sequence: The stop sequence that ended the reply, if one did.
        reasoning: A reasoning model's thoughts (empty for others).
    """

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    swapless: dict = field(default_factory=dict)
    key: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    stop_sequence: str = ""
    reasoning: str = ""
