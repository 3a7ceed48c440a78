"""The tool loop of a conversation, for real: a model, an MCP server, a SQLite file.

The model is the tiny random-weight one in the reference format, made to call the
named tool by the engine's llguidance constraint (`tool_choices`); the call is parsed
from what it generated, sent to `tests/core/mcp/tool_server.py` (the official SDK, a
real subprocess over stdio), and the result goes back to the model, the store and
the events the window and the CLI show.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from app.core.chat.conversation_session import ConversationSession
from app.core.chat.tool_setup import ConsentRequest, ToolSetup
from app.core.chat.turn_events import (
    ToolNotice,
    ToolRunFinished,
    ToolRunStarted,
    TurnFinished,
)
from app.core.mcp.config import ServerConfig
from app.core.mcp.consent import DENIED_TEXT, ConsentPolicy, Decision
from app.core.mcp.host import McpHost
from app.core.presets.presets import get_preset
from app.core.store import Store

SERVER = Path(__file__).parents[1] / "mcp" / "tool_server.py"
STDIO = ServerConfig(name="tools", command=sys.executable, args=(str(SERVER), "stdio"))


@pytest.fixture(scope="module")
def host():
    with McpHost({"tools": STDIO}, start_timeout_s=60, call_timeout_s=30) as h:
        yield h


class Answers:
    """A consent asker that answers from a list and remembers what it was asked."""

    def __init__(self, *answers: Decision):
        self.answers = list(answers)
        self.asked: list[ConsentRequest] = []

    def __call__(self, request: ConsentRequest) -> Decision:
        self.asked.append(request)
        return self.answers.pop(0)


def start(engine, store, tools: ToolSetup, **changes) -> ConversationSession:
    preset = get_preset("chat").with_changes(
        system_prompt="You are a test bot.",
        temperature=0.0,
        max_tokens=48,
        thinking=False,
        **changes,
    )
    return ConversationSession.start(
        engine, store, preset, model="tiny-thinking", tools=tools, seed=0
    )


def setup_for(host, tool_choices, tool: str, **kwargs) -> ToolSetup:
    first, later = tool_choices(tool)
    return ToolSetup(host, ("tools",), first_choice=first, later_choice=later, **kwargs)


def run(session: ConversationSession, text: str) -> list:
    return list(session.send(text))


def test_a_call_runs_after_consent_and_its_result_reaches_the_model(
    tool_engine, store, host, tool_choices
):
    answers = Answers(Decision.ALLOW_ONCE, Decision.ALLOW_ONCE)
    session = start(
        tool_engine, store, setup_for(host, tool_choices, "secret_word", ask=answers)
    )
    events = run(session, "What is the secret word?")
    started = [e for e in events if isinstance(e, ToolRunStarted)]
    finished = [e.call for e in events if isinstance(e, ToolRunFinished)]
    report = events[-1].report
    assert isinstance(events[-1], TurnFinished)
    assert [s.tool for s in started] == ["secret_word"] and started[0].needs_consent
    assert sys.executable in started[0].command
    assert [r.tool for r in answers.asked] == ["secret_word"]
    call = finished[0]
    assert call.result == "The word is periwinkle."
    assert call.decision == "once" and not call.is_error and not call.cut_note
    assert report.tool_calls == 1
    # Stored with the reply that made it; the answer is a later reply.
    stored = store.tool_calls(session.conversation_id)
    assert list(stored) == [call.message_id] and report.message_id > call.message_id
    # The model's next prompt held the result: the conversation renders it again.
    messages = session.model_messages(session.context())
    tool_messages = [m for m in messages if m["role"] == "tool"]
    assert tool_messages == [
        {
            "role": "tool",
            "tool_call_id": call.call_id,
            "name": "secret_word",
            "content": "The word is periwinkle.",
        }
    ]
    caller = messages[messages.index(tool_messages[0]) - 1]
    assert caller["tool_calls"][0]["function"]["name"] == "secret_word"
    rendered = tool_engine.tokenizer.decode(
        tool_engine.render(messages, False, session.template_tools())
    )
    assert "<tool_response>" in rendered and "periwinkle" in rendered
    # "Once" asks again next turn.
    run(session, "And again?")
    assert len(answers.asked) == 2


def test_always_is_remembered_and_deny_reaches_the_model_as_a_result(
    tool_engine, store, host, tool_choices
):
    answers = Answers(Decision.ALLOW_ALWAYS)
    session = start(
        tool_engine, store, setup_for(host, tool_choices, "secret_word", ask=answers)
    )
    run(session, "Secret?")
    second = run(session, "Secret again?")
    assert len(answers.asked) == 1
    assert [e.call.decision for e in second if isinstance(e, ToolRunFinished)] == [
        "always"
    ]
    denier = Answers(Decision.DENY)
    denied = start(
        tool_engine, store, setup_for(host, tool_choices, "secret_word", ask=denier)
    )
    call = next(
        e.call for e in run(denied, "Secret?") if isinstance(e, ToolRunFinished)
    )
    assert call.is_error and call.result == DENIED_TEXT and call.decision == "deny"


def test_a_trusted_tool_runs_without_asking(tool_engine, store, host, tool_choices):
    answers = Answers()
    setup = setup_for(
        host,
        tool_choices,
        "secret_word",
        ask=answers,
        policy=ConsentPolicy.from_settings(["tools/secret_word"]),
    )
    events = run(start(tool_engine, store, setup), "Secret?")
    started = next(e for e in events if isinstance(e, ToolRunStarted))
    call = next(e.call for e in events if isinstance(e, ToolRunFinished))
    assert not started.needs_consent and answers.asked == []
    assert call.decision == "trusted" and "periwinkle" in call.result


def test_a_200_kb_result_is_cut_to_the_room_left_with_the_note(
    tool_engine, store, host, tool_choices
):
    setup = setup_for(
        host,
        tool_choices,
        "big_result",
        policy=ConsentPolicy.from_settings(["tools/big_result"]),
    )
    session = start(tool_engine, store, setup, max_context=1536)
    events = run(session, "Give me the big result.")
    call = next(e.call for e in events if isinstance(e, ToolRunFinished))
    assert call.cut_note and call.result.endswith(call.cut_note)
    assert call.original_tokens is not None and call.original_tokens > 20_000
    assert call.result_tokens is not None and call.result_tokens < 1536
    # What was kept ends at a line, and the model's next prompt fit in the limit.
    kept = call.result[: -len(call.cut_note)].rstrip()
    assert kept.endswith("lazy dog.")
    report = events[-1].report
    assert report.prompt_tokens + 48 <= 1536


def test_a_server_that_exits_mid_call_or_never_answers_is_a_result_in_words(
    tool_engine, store, tool_choices
):
    trusted = ConsentPolicy.from_settings(["tools/exit_now", "tools/hang"])
    with McpHost({"tools": STDIO}, start_timeout_s=60, call_timeout_s=2) as h:
        for tool, words in (("exit_now", "tools"), ("hang", "did not answer")):
            setup = setup_for(h, tool_choices, tool, policy=trusted)
            events = run(start(tool_engine, store, setup), f"Call {tool}.")
            call = next(e.call for e in events if isinstance(e, ToolRunFinished))
            assert call.is_error and words in call.result
            assert isinstance(events[-1], TurnFinished)


def test_stop_ends_a_call_in_flight(tool_engine, store, tool_choices):
    trusted = ConsentPolicy.from_settings(["tools/hang"])
    with McpHost({"tools": STDIO}, start_timeout_s=60, call_timeout_s=600) as h:
        session = start(
            tool_engine, store, setup_for(h, tool_choices, "hang", policy=trusted)
        )
        turn = session.send("Hang, please.")
        events = []
        for event in turn:
            events.append(event)
            if isinstance(event, ToolRunStarted):
                # Stop from another thread while the call waits, as Esc does.
                threading.Timer(0.5, turn.cancel).start()
        call = next(e.call for e in events if isinstance(e, ToolRunFinished))
        assert call.is_error and "stopped" in call.result
        assert events[-1].report.finish_reason == "cancelled"


def test_the_cap_of_calls_per_turn_ends_the_loop(tool_engine, store, host):
    from app.core.tools.tool_specs import ToolChoice

    # Every reply is made to call: only the cap can end this turn.
    forced = ToolChoice("named", "secret_word")
    setup = ToolSetup(
        host,
        ("tools",),
        policy=ConsentPolicy.from_settings(["tools/secret_word"]),
        max_calls=2,
        first_choice=forced,
        later_choice=forced,
        parallel=False,
    )
    events = run(start(tool_engine, store, setup), "Call it forever.")
    assert len([e for e in events if isinstance(e, ToolRunFinished)]) == 2
    assert any(isinstance(e, ToolNotice) and "limit of 2" in e.text for e in events)
    assert events[-1].report.tool_calls == 2


def test_calls_are_shown_again_when_the_conversation_is_reopened(
    tool_engine, tmp_path, host, tool_choices
):
    path = tmp_path / "reopen.db"
    with Store.open(path) as store:
        setup = setup_for(
            host,
            tool_choices,
            "secret_word",
            policy=ConsentPolicy.from_settings(["tools/secret_word"]),
        )
        session = start(tool_engine, store, setup)
        run(session, "Secret?")
        before = session.model_messages(session.context())
        conversation_id = session.conversation_id
    with Store.open(path) as store:
        again = ConversationSession(tool_engine, store, conversation_id)
        assert again.model_messages(again.context()) == before
        calls = store.tool_calls(conversation_id)
        assert [c.tool for made in calls.values() for c in made] == ["secret_word"]


def test_a_server_that_cannot_start_is_a_notice_and_the_turn_goes_on(
    tool_engine, store
):
    broken = ServerConfig(name="gone", command="/nonexistent/swapless-mcp-server")
    with McpHost({"gone": broken}, start_timeout_s=10, call_timeout_s=5) as h:
        session = start(tool_engine, store, ToolSetup(h, ("gone",)))
        events = run(session, "Hello")
    notices = [e.text for e in events if isinstance(e, ToolNotice)]
    assert notices and "gone" in notices[0] and "not available" in notices[0]
    assert isinstance(events[-1], TurnFinished) and events[-1].report.tool_calls == 0


def test_a_conversation_with_calls_trims_and_keeps_calls_with_their_replies(
    tool_engine, store, host, tool_choices
):
    from app.core.chat.turn_events import Trimmed

    setup = setup_for(
        host,
        tool_choices,
        "secret_word",
        policy=ConsentPolicy.from_settings(["tools/secret_word"]),
    )
    session = start(
        tool_engine, store, setup, max_context=1280, summary_mode="extractive"
    )
    trimmed = False
    for turn in range(12):
        events = run(session, f"Turn {turn}: what is the secret word this time?")
        assert isinstance(events[-1], TurnFinished)
        trimmed |= any(isinstance(e, Trimmed) for e in events)
        if trimmed:
            break
    assert trimmed, "the conversation should have outgrown 1280 tokens"
    messages = session.model_messages(session.context())
    # No result without the call that asked for it, none lost after a kept call.
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            caller = next(m for m in reversed(messages[:index]) if m["role"] != "tool")
            ids = [c["id"] for c in caller.get("tool_calls", [])]
            assert message["tool_call_id"] in ids
    # The trimmed turn's prompt, tool results and all, fit the limit.
    assert events[-1].report.prompt_tokens + 48 <= 1280


def test_a_server_over_streamable_http_serves_the_loop(
    tool_engine, store, tool_choices
):
    from tests.core.mcp.loopback import tools_over_http

    with tools_over_http() as url:
        web = ServerConfig(name="web", url=url)
        with McpHost({"web": web}, start_timeout_s=60, call_timeout_s=30) as h:
            first, later = tool_choices("secret_word")
            setup = ToolSetup(
                h,
                ("web",),
                policy=ConsentPolicy.from_settings(["web/secret_word"]),
                first_choice=first,
                later_choice=later,
            )
            events = run(start(tool_engine, store, setup), "Secret, over HTTP?")
    call = next(e.call for e in events if isinstance(e, ToolRunFinished))
    assert call.server == "web" and "periwinkle" in call.result
