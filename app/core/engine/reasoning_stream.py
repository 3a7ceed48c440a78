"""Split a reply's tokens into reasoning and answer as they stream; end runaway thoughts.

One state machine per reply, fed every generated token id, that says which channel the
token belongs to (`app.core.turn.parts.REASONING` or `ANSWER`) or that it is a marker
(``<think>``, ``</think>``, harmony's channel headers), which is never shown. Markers of
several tokens are matched with a short hold-back: tokens that might start a marker
wait until they do or cannot. The generation loop (`generation.run_turn`) owns the
detokenizer and the model; this module only decides.

Rules (the issue's bad-input list): a start marker after the answer began, and an end
marker with no reasoning open, are shown as plain answer text; text the model writes
before any start marker is answer text unless the prompt itself opened the reasoning
(`markers.prompt_opens_reasoning`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from app.core.reasoning.markers import ReasoningFormat, prompt_opens_reasoning
from app.core.turn.parts import ANSWER, REASONING, Channel

MARKER = "marker"


@dataclass(frozen=True)
class Routed:
    """Tokens released by the splitter, with where they go.

    Attributes:
        ids: The token ids, in order.
        channel: `REASONING`, `ANSWER`, or `MARKER` (not shown).
    """

    ids: tuple[int, ...]
    channel: str


@dataclass
class ReasoningSplitter:
    """Route each generated token to reasoning, answer or nowhere (a marker).

    Args:
        fmt: The model's reasoning format.
        prompt_ids: The turn's prompt (an open reasoning block at its end means the
            reply starts inside reasoning).
    """

    fmt: ReasoningFormat
    prompt_ids: Sequence[int] = ()
    state: str = field(init=False)
    reasoning_tokens: int = field(init=False, default=0)
    answer_started: bool = field(init=False, default=False)
    _held: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        opened = prompt_opens_reasoning(self.fmt, self.prompt_ids)
        # "start": nothing written yet; a start marker may still come.
        self.state = REASONING if opened else "start"

    @property
    def channel(self) -> Channel:
        """The channel text is going to now."""
        return REASONING if self.state == REASONING else ANSWER

    @property
    def in_reasoning(self) -> bool:
        """True while the model is reasoning (the budget applies)."""
        return self.state == REASONING

    def _markers(self) -> list[tuple[tuple[int, ...], str]]:
        """(marker ids, state after it) recognised in the current state."""
        fmt = self.fmt
        if self.state == REASONING:
            return [(fmt.end_ids, "after_reasoning")]
        if self.state == "start":
            found: list[tuple[tuple[int, ...], str]] = [(fmt.start_ids, REASONING)]
            found += [(ids, ANSWER) for ids in fmt.answer_ids]
            return found
        if self.state == "after_reasoning":
            return [(ids, ANSWER) for ids in fmt.answer_ids]
        return []

    def feed(self, token: int) -> list[Routed]:
        """Take one generated token; return what can be released now."""
        if not self.fmt.has_reasoning:
            return [Routed((token,), ANSWER)]
        if self.state == REASONING:
            self.reasoning_tokens += 1
        self._held.append(token)
        held = tuple(self._held)
        for marker, after in self._markers():
            if marker and held == marker:
                self._held.clear()
                self._enter(after)
                return [Routed(held, MARKER)]
        if any(m and m[: len(held)] == held for m, _ in self._markers()):
            return []  # may still become a marker
        return self._release()

    def _enter(self, state: str) -> None:
        self.state = state

    def _release(self) -> list[Routed]:
        """Release held tokens as text of the current channel."""
        held = tuple(self._held)
        self._held.clear()
        if self.state == "start" or (
            self.state == "after_reasoning" and not self.fmt.answer_ids
        ):
            self.state = ANSWER
        elif self.state == "after_reasoning":
            # Harmony text between channels (e.g. a stray role header) is not shown.
            return [Routed(held, MARKER)]
        channel = REASONING if self.state == REASONING else ANSWER
        if channel == ANSWER:
            self.answer_started = True
        return [Routed(held, channel)]

    def flush(self) -> list[Routed]:
        """Release whatever is held at the end of the reply."""
        if not self._held:
            return []
        return self._release()

    def over_budget(self, budget: int) -> bool:
        """True when reasoning reached ``budget`` tokens (0: no budget)."""
        return budget > 0 and self.in_reasoning and self.reasoning_tokens >= budget


def forced_end_ids(fmt: ReasoningFormat, encode) -> list[int]:
    """The tokens the engine writes to end reasoning at the budget."""
    return list(encode(fmt.forced_end)) if fmt.forced_end else []


class ReplyRouter:
    """The detokenizer and the splitter together: token ids in, channelled text out.

    The streaming detokenizer holds back incomplete characters; at a channel change
    it is flushed so no byte of the reasoning lands in the answer or the other way
    round. The answer's leading newlines (templates put ``\\n\\n`` after ``</think>``
    and strip them when they render the reply back: only newlines, so the stored
    answer re-renders to the tokens the cache holds) are not shown.

    Args:
        detokenizer: mlx-lm's streaming detokenizer of the model (reset here).
        splitter: The reply's splitter.
        emit_text: Called with ``(text, channel)`` for each piece of text.
    """

    def __init__(self, detokenizer, splitter: ReasoningSplitter, emit_text) -> None:
        self._detokenizer = detokenizer
        self._detokenizer.reset()
        self.splitter = splitter
        self._emit_text = emit_text
        self.channel: Channel = splitter.channel
        self._answer_text = False
        self.reasoning_text: list[str] = []

    def _flush(self) -> None:
        self._detokenizer.finalize()
        self._send(self._detokenizer.last_segment)
        self._detokenizer.reset()

    def _send(self, text: str) -> None:
        if self.channel == ANSWER and not self._answer_text:
            text = text.lstrip("\n")
            if not text:
                return
            self._answer_text = True
        if self.channel == REASONING:
            self.reasoning_text.append(text)
        self._emit_text(text, self.channel)

    def add(self, token: int) -> None:
        """Route one generated token (its text is emitted when known)."""
        for routed in self.splitter.feed(token):
            self._route(routed)

    def _route(self, routed: Routed) -> None:
        if routed.channel == MARKER:
            if self.splitter.channel != self.channel:
                self._flush()
                self.channel = self.splitter.channel
            return
        if routed.channel != self.channel:
            self._flush()
            self.channel = routed.channel  # type: ignore[assignment]
        for token in routed.ids:
            self._detokenizer.add_token(token)
            self._send(self._detokenizer.last_segment)

    def finish(self) -> str:
        """Release held tokens and the detokenizer's rest; return the last text."""
        for routed in self.splitter.flush():
            self._route(routed)
        self._detokenizer.finalize()
        text = self._detokenizer.last_segment
        if self.channel == ANSWER and not self._answer_text:
            text = text.lstrip("\n")
        if self.channel == REASONING:
            self.reasoning_text.append(text)
        return text
