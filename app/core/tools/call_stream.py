"""Take a model's streamed output apart into answer text and tool calls.

A model writes a call in its own markup between a start and an end marker
(``<tool_call>`` … ``</tool_call>`` for Qwen-style templates); mlx-lm's tokenizer
wrapper says which markers and which parser apply to the loaded model, and the engine
hands them over as a `CallFormat`. Text is released as soon as it cannot be the start
of a call: a suffix that is a prefix of the start marker is held back until the next
text decides it, so raw markup never reaches the answer. A call is parsed when its end
marker arrives (or when the reply ends inside it) and comes out as
`ToolCallStarted`, one `ToolCallDelta` with its arguments and `ToolCallFinished`.

A call that does not parse, or names a function that was not offered, comes back as
text (the markup included) together with a `MalformedCall` note: never an error. A
call beyond ``max_calls`` (``parallel_tool_calls: false``) is dropped with a note.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.turn.parts import (
    ToolCall,
    ToolCallDelta,
    ToolCallFinished,
    ToolCallStarted,
    ToolSpec,
)

# mlx-lm's ``parse_tool_call(text, tools)``: a dict (or list of dicts) with ``name``
# and ``arguments``; raises ValueError (json.JSONDecodeError included) on bad text.
Parser = Callable[[str, Any], Any]
# The formats whose calls a grammar constrains (JSON between markers, the markup of
# `markup_grammars`, Gemma 4's notation and harmony's commentary-channel calls); any
# other format's calls are parsed only.
CONSTRAINED_FORMATS = (
    "json_tools",
    "qwen3_coder",
    "glm47",
    "mistral",
    "pythonic",
    "kimi_k2",
    "minimax_m2",
    "gemma4",
    "harmony",
)


@dataclass(frozen=True)
class CallFormat:
    """How the loaded model writes a call.

    Attributes:
        name: The parser's name (``json_tools``, ``qwen3_coder``, …).
        start: The text that opens a call.
        end: The text that closes it.
        parse: Turns the text between the markers into ``{"name", "arguments"}``.
    """

    name: str
    start: str
    end: str
    parse: Parser

    @property
    def constrained(self) -> bool:
        """True when a grammar can constrain the text between the markers
        (`app.core.tools.markup_grammars`), so a call can be forced."""
        return self.name in CONSTRAINED_FORMATS


@dataclass(frozen=True)
class MalformedCall:
    """A call the model wrote that could not be used: its text went to the answer (or,
    past ``max_calls``, it was dropped).

    Attributes:
        text: The markup, as written.
        reason: Why it was not taken as a call.
    """

    text: str
    reason: str


StreamItem = str | ToolCallStarted | ToolCallDelta | ToolCallFinished | MalformedCall


def new_call_id() -> str:
    """A fresh call id in OpenAI's style."""
    return f"call_{uuid.uuid4().hex[:24]}"


def _held_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``marker``."""
    for size in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-size:]):
            return size
    return 0


class CallStream:
    """Splits streamed text into answer text and tool-call events.

    Args:
        call_format: The model's markers and parser.
        tools: The offered tools; a call to any other name is malformed. Empty:
            any name is taken.
        new_id: Makes call ids (tests pass a counter).
        max_calls: Calls kept per reply (None: any number).
    """

    def __init__(
        self,
        call_format: CallFormat,
        tools: Sequence[ToolSpec] = (),
        new_id: Callable[[], str] = new_call_id,
        max_calls: int | None = None,
    ):
        self._max_calls = max_calls
        self.format = call_format
        self._tools = list(tools)
        self._tool_dicts = [t.template_dict() for t in tools] or None
        self._new_id = new_id
        self._pending = ""
        self._inside = False
        self.calls: list[ToolCall] = []
        self.malformed: list[MalformedCall] = []

    @property
    def holding(self) -> bool:
        """True while text is held back (a possible or open call)."""
        return self._inside or bool(self._pending)

    def feed(self, text: str) -> list[StreamItem]:
        """Take the next text of the reply; return what can be released now."""
        self._pending += text
        out: list[StreamItem] = []
        start, end = self.format.start, self.format.end
        while self._pending:
            if not self._inside:
                at = self._pending.find(start)
                if at < 0:
                    keep = _held_suffix(self._pending, start)
                    cut = len(self._pending) - keep
                    if cut:
                        out.append(self._pending[:cut])
                    self._pending = self._pending[cut:]
                    break
                if at:
                    out.append(self._pending[:at])
                self._pending = self._pending[at + len(start) :]
                self._inside = True
            else:
                # A format without an end marker (mistral's) writes its calls last:
                # they run to the end of the reply, read at `close`.
                at = self._pending.find(end) if end else -1
                if at < 0:
                    break
                body = self._pending[:at]
                self._pending = self._pending[at + len(end) :]
                self._inside = False
                out.extend(self._finish_call(body, closed=True))
        return out

    def close(self, cut: bool = False) -> list[StreamItem]:
        """The reply ended: release what was held.

        Args:
            cut: The reply stopped at its token limit. An open call is then
                unfinished, whatever a lenient parser would read from it, and goes
                out as text with a note; otherwise (the model stopped) it is parsed
                as is: for a format without an end marker, every call from the first
                start marker on.
        """
        out: list[StreamItem] = []
        if self._inside:
            body, self._pending, self._inside = self._pending, "", False
            if cut:
                markup = self.format.start + body
                note = MalformedCall(
                    markup,
                    "the reply reached its token limit inside a tool call: the call "
                    "is unfinished and was not made",
                )
                self.malformed.append(note)
                return [markup, note]
            out.extend(self._finish_call(body, closed=not self.format.end))
        elif self._pending:
            out.append(self._pending)
            self._pending = ""
        return out

    def _finish_call(self, body: str, *, closed: bool) -> list[StreamItem]:
        markup = self.format.start + body + (self.format.end if closed else "")
        if self._max_calls is not None and len(self.calls) >= self._max_calls:
            note = MalformedCall(
                markup,
                f"a further tool call was dropped: at most {self._max_calls} per "
                "reply (parallel tool calls are off)",
            )
            self.malformed.append(note)
            return [note]
        try:
            parsed = self.format.parse(body, self._tool_dicts)
            entries = parsed if isinstance(parsed, list) else [parsed]
            calls = [self._call(entry) for entry in entries]
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            reason = f"the model wrote a tool call that could not be used: {exc}"
            if not closed:
                reason += " (the reply ended inside it)"
            note = MalformedCall(markup, reason)
            self.malformed.append(note)
            return [markup, note]
        out: list[StreamItem] = []
        room = None if self._max_calls is None else self._max_calls - len(self.calls)
        if room is not None and len(calls) > room:
            # One body can hold several calls (a JSON list, mistral's headers).
            calls = calls[: max(room, 0)]
            note = MalformedCall(
                markup,
                f"further tool calls were dropped: at most {self._max_calls} per "
                "reply (parallel tool calls are off)",
            )
            self.malformed.append(note)
            out.append(note)
        for call in calls:
            index = len(self.calls)
            self.calls.append(call)
            out.append(ToolCallStarted(index, call.id, call.name))
            out.append(ToolCallDelta(index, call.arguments))
            out.append(ToolCallFinished(index, call))
        return out

    def _call(self, entry: Any) -> ToolCall:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise ValueError("no function name")
        name = entry["name"]
        if self._tools and name not in {t.name for t in self._tools}:
            raise ValueError(f"{name!r} is not one of the offered tools")
        arguments = entry.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments) if arguments.strip() else {}
        if not isinstance(arguments, dict):
            raise ValueError("the arguments are not a JSON object")
        ident = entry.get("id")
        return ToolCall(
            id=ident if isinstance(ident, str) and ident else self._new_id(),
            name=name,
            arguments=json.dumps(arguments, ensure_ascii=False),
        )
