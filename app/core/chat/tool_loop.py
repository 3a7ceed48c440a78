"""A turn's replies and tool calls: generate, run the calls, give the results, go on.

One turn is one or more replies. Each reply streams from the engine and is stored;
when tools are offered (`ToolSetup`) and the reply called some, every call is asked
about (unless trusted or allowed "always"), run on its MCP server with Stop polled
while it waits, its result cut to the room the budget leaves (`fit_result`: the note
goes to the model and to the card), stored with the reply (`StoredToolCall`) and
given back to the model as a ``tool`` message; the model then continues. A cap of
calls per turn ends the loop: after it, the model is offered the tools with
``tool_choice`` ``none`` and must answer.

Stored history renders the same way again (`with_tool_calls`), so a reopened
conversation prompts the tokens the model saw.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import replace
from typing import Any, Protocol

from app.core.cancel import CancelToken
from app.core.chat.reasoning_turns import align_cache
from app.core.chat.tool_setup import ConsentRequest, ToolSetup
from app.core.chat.trimmer import TrimOutcome
from app.core.chat.turn_events import (
    ToolNotice,
    ToolRunFinished,
    ToolRunStarted,
    TurnFinished,
)
from app.core.chat.turn_report import TurnReport, reply_stats
from app.core.engine.events import GenerationEvent
from app.core.mcp.consent import DENIED_TEXT, Decision, tool_key
from app.core.mcp.result_fit import fit_result
from app.core.presets.presets import Preset
from app.core.reasoning.thinking import reply_room
from app.core.recall.recaller import RecallResult
from app.core.store import Store
from app.core.store.calls.tool_calls import StoredToolCall
from app.core.store.records import Message
from app.core.store.reply_saver import ReplySaver
from app.core.tools.turn_tools import TurnTools
from app.core.turn.parts import REASONING, ToolCall, ToolCallFinished

# Tokens a tool message's template framing may take around its result.
RESULT_FRAMING_TOKENS = 24


class ReplySession(Protocol):
    """What the loop needs of `ConversationSession`."""

    engine: Any
    store: Store
    conversation_id: int
    preset: Preset
    seed: int | None
    cache_key: str
    tools: ToolSetup | None

    def effective_limit(self) -> int:
        """The conversation's token limit now."""
        ...


def with_tool_calls(
    messages: list[dict[str, Any]],
    stored: Sequence[Message],
    calls: dict[int, list[StoredToolCall]],
) -> list[dict[str, Any]]:
    """Give stored replies their ``tool_calls`` and follow each with its results.

    Args:
        messages: Built by `build_messages`; its last assistant entries are
            ``stored``'s replies (as `with_reasoning` assumes).
        stored: The stored messages in the model's context, in order.
        calls: The conversation's calls by message id (`Store.tool_calls`).
    """
    replies = [m for m in stored if m.role == "assistant"]
    if not calls or not replies:
        return messages
    places = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    pairs = list(zip(places[-len(replies) :], replies, strict=False))
    for index, message in reversed(pairs):
        made = calls.get(message.id)
        if made:
            messages[index] = {
                **messages[index],
                "tool_calls": [c.call_dict() for c in made],
            }
            messages[index + 1 : index + 1] = [c.result_message() for c in made]
    return messages


def tool_tokens(made: Sequence[StoredToolCall], count_tokens: Any) -> int:
    """Tokens a reply's calls and their results add to the prompt (estimate)."""
    total = 0
    for call in made:
        result = call.result_tokens
        if result is None:
            result = count_tokens(call.result)
        total += result + count_tokens(call.arguments) + RESULT_FRAMING_TOKENS
    return total


def _reply_message(saver: ReplySaver, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": saver.text,
        "tool_calls": [c.template_dict() for c in calls],
    }
    if saver.reasoning:
        message["reasoning_content"] = saver.reasoning
    return message


class ToolLoop:
    """Runs one turn's replies, and the tool calls between them.

    Args:
        session: The conversation's session.
        cancel: The turn's Stop.
    """

    def __init__(self, session: ReplySession, cancel: CancelToken):
        self.session = session
        self.cancel = cancel
        self.setup = session.tools
        self.calls_made = 0

    def run(
        self,
        messages: list[dict[str, Any]],
        outcome: TrimOutcome | None,
        recall: RecallResult | None = None,
    ) -> Iterator[Any]:
        """Yield the turn's events, ending with `TurnFinished`."""
        session = self.session
        turn_tools = self._offer(0)
        yield from self._notices()
        while True:
            message_id, saver, final, calls = yield from self._reply(
                messages, turn_tools
            )
            if (
                not calls
                or self.setup is None
                or self.cancel.cancelled
                or final.finish_reason == "cancelled"
            ):
                break
            messages = [*messages, _reply_message(saver, calls)]
            for position, call in enumerate(calls):
                record = yield from self._run_call(
                    call, message_id, position, messages, turn_tools
                )
                messages.append(record.result_message())
            if self.cancel.cancelled:
                break
            if self.calls_made >= self.setup.max_calls:
                yield ToolNotice(
                    f"{self.calls_made} tool calls this turn: the limit of "
                    f"{self.setup.max_calls} is reached; the model answers now."
                )
            turn_tools = self._offer(self.calls_made)
        report = TurnReport.from_final(
            final,
            reply=saver.text,
            conversation_id=session.conversation_id,
            message_id=message_id,
            effective_max_context=session.effective_limit(),
            preset_max_context=session.preset.max_context,
        )
        report = replace(report, reasoning=saver.reasoning, tool_calls=self.calls_made)
        if self.cancel.cancelled:
            report = replace(report, finish_reason="cancelled")
        if turn_tools is None:
            thinking = session.preset.thinking_settings()
            report = align_cache(
                session.engine, session.cache_key, messages, report, thinking
            )
        report = with_trim(report, outcome)
        if recall is not None and recall.recalled:
            report = replace(
                report,
                recalled=recall.recalled,
                recall_cut=recall.cut,
                recall_ms=recall.ms,
            )
        yield TurnFinished(report)

    def _offer(self, calls_made: int) -> TurnTools | None:
        if self.setup is None or not self.session.engine.supports_tools():
            return None
        return self.setup.turn_tools(calls_made)

    def _notices(self) -> Iterator[ToolNotice]:
        if self.setup is not None:
            for text in self.setup.take_notices():
                yield ToolNotice(text)

    def _reply(
        self, messages: list[dict[str, Any]], turn_tools: TurnTools | None
    ) -> Generator[Any, None, tuple[int, ReplySaver, Any, list[ToolCall]]]:
        """Stream and store one reply; return (message id, saver, final, calls)."""
        session = self.session
        preset = session.preset
        message_id = session.store.begin_reply(session.conversation_id)
        saver = ReplySaver(session.store, message_id)
        extra: dict[str, Any] = {"tools": turn_tools} if turn_tools else {}
        handle = session.engine.chat(
            session.cache_key,
            messages,
            preset.kv_settings(),
            preset.sampling_settings(session.seed),
            max_context=session.effective_limit(),
            cancel=self.cancel,
            thinking=preset.thinking_settings(),
            **extra,
        )
        calls: list[ToolCall] = []
        try:
            for event in handle:
                if isinstance(event, GenerationEvent) and event.text:
                    saver.add(event.text, reasoning=event.channel == REASONING)
                elif isinstance(event, ToolCallFinished):
                    calls.append(event.call)
                yield event
        except GeneratorExit:
            # The consumer stopped listening (a closed pipe, a client gone): like a
            # Stop, the reply is kept as far as it got and the engine stops.
            handle.cancel()
            saver.finish(stopped=True)
            raise
        except BaseException as exc:
            handle.cancel()
            saver.fail(exc)
            raise
        final = handle.final
        saver.finish(reply_stats(final), stopped=final.finish_reason == "cancelled")
        return message_id, saver, final, calls

    def _room(
        self, messages: list[dict[str, Any]], turn_tools: TurnTools | None
    ) -> int:
        """Tokens a result may take: the limit less the prompt and the reply's share."""
        session = self.session
        template_tools = turn_tools.template_tools() if turn_tools else None
        prompt = len(
            session.engine.render(
                messages, True, template_tools, session.preset.thinking_settings()
            )
        )
        # The reply's room includes a thinking budget where the model thinks.
        reply = reply_room(
            session.preset.max_tokens,
            session.preset.thinking_settings(),
            session.engine.tokenizer.reasoning,
        )
        room = session.effective_limit() - reply - prompt - RESULT_FRAMING_TOKENS
        return max(room, 0)

    def _run_call(
        self,
        call: ToolCall,
        message_id: int,
        position: int,
        messages: list[dict[str, Any]],
        turn_tools: TurnTools | None,
    ) -> Generator[Any, None, StoredToolCall]:
        """Ask, run, fit and store one call; return the `StoredToolCall`."""
        setup = self.setup
        assert setup is not None  # only called with tools offered
        offered = setup.catalog().find(call.name)
        server = offered.server if offered is not None else ""
        tool = offered.tool if offered is not None else call.name
        record = StoredToolCall(
            call_id=call.id,
            server=server,
            tool=call.name,
            arguments=call.arguments,
            result="",
            message_id=message_id,
            position=position,
        )
        needs = offered is not None and setup.policy.needs_asking(server, tool)
        yield ToolRunStarted(
            call.id, server, call.name, call.arguments, needs, setup.command_of(server)
        )
        started = time.monotonic()
        text, is_error, decision = self._outcome(call, server, tool, needs)
        if offered is not None and decision in ("once", "always", "trusted"):
            outcome = setup.host.call(
                server,
                tool,
                call.arguments_dict(),
                call.id,
                cancelled=self.cancel,
            )
            text, is_error = outcome.result.content, outcome.result.is_error
            if self.cancel.cancelled:
                text, is_error = "The user stopped this tool call.", True
        fitted = fit_result(
            text, self._room(messages, turn_tools), self.session.engine.count_tokens
        )
        self.calls_made += 1
        record = replace(
            record,
            result=fitted.text,
            is_error=is_error,
            decision=decision,
            cut_note=fitted.note,
            seconds=time.monotonic() - started,
            original_tokens=fitted.original_tokens,
            result_tokens=fitted.kept_tokens,
        )
        self.session.store.add_tool_call(record)
        yield ToolRunFinished(record)
        return record

    def _outcome(
        self, call: ToolCall, server: str, tool: str, needs: bool
    ) -> tuple[str, bool, str]:
        """Why a call will not run (text, error, decision), or its decision to run."""
        setup = self.setup
        assert setup is not None
        if not server:
            names = ", ".join(s.name for s in setup.catalog().specs()) or "none"
            return (
                f"No tool named {call.name!r} is offered (offered: {names}).",
                True,
                "",
            )
        if self.calls_made >= setup.max_calls:
            return (
                f"The limit of {setup.max_calls} tool calls per turn is reached; "
                "answer with what you have.",
                True,
                "",
            )
        try:
            call.arguments_dict()
        except ValueError as exc:
            return f"The arguments are not a JSON object: {exc}", True, ""
        if not needs:
            trusted = tool_key(server, tool) in setup.policy.trusted
            return "", False, "trusted" if trusted else "always"
        if self.cancel.cancelled:
            return "The user stopped this tool call.", True, "deny"
        answer = setup.ask(ConsentRequest(call.id, server, tool, call.arguments))
        if self.cancel.cancelled:
            return "The user stopped this tool call.", True, "deny"
        if not setup.policy.record(server, tool, answer):
            return DENIED_TEXT, True, Decision.DENY.value
        return "", False, answer.value


def with_trim(report: TurnReport, outcome: TrimOutcome | None) -> TurnReport:
    """The report with what the turn's trim did (unchanged without a trim)."""
    if outcome is None:
        return report
    return replace(
        report,
        trimmed=True,
        trim_ms=outcome.total_ms,
        trim_cache_ms=outcome.cache_ms,
        trim_method=outcome.cache_method,
        summary_tokens=outcome.summary_tokens,
        summary_method=outcome.summary_method,
        trim_note=outcome.note,
    )
