"""Tool calls stored with their reply: kept, deleted with it, exported and imported.

Schema migration 7 adds them; a database from before opens with every row intact and
no calls. The JSON export carries a reply's calls in order (the round trip holds);
the import validates them like everything else; the Markdown shows each as a card.
"""

from __future__ import annotations

import json

import pytest

from app.core.errors import InputError
from app.core.presets.presets import get_preset
from app.core.store import SCHEMA_VERSION, Store, migrations
from app.core.store.calls.tool_calls import StoredToolCall


def _reply_with_calls(store: Store, conversation_id: int) -> int:
    store.add_message(conversation_id, "user", "What is the secret word?")
    reply = store.begin_reply(conversation_id)
    store.finish_reply(reply, "")
    store.add_tool_call(
        StoredToolCall(
            call_id="call_1",
            server="tools",
            tool="secret_word",
            arguments='{"topic": "x"}',
            result="The secret word is periwinkle.",
            decision="once",
            seconds=0.25,
            original_tokens=9,
            result_tokens=9,
            message_id=reply,
        )
    )
    store.add_tool_call(
        StoredToolCall(
            call_id="call_2",
            server="tools",
            tool="big_result",
            arguments="{}",
            result="Line 0 ```\n\n[Swapless cut this tool result]",
            cut_note="[Swapless cut this tool result]",
            decision="trusted",
            original_tokens=40_000,
            result_tokens=12,
            message_id=reply,
            position=1,
        )
    )
    return reply


def test_calls_are_kept_in_order_and_leave_with_their_reply(store, conversation_id):
    reply = _reply_with_calls(store, conversation_id)
    calls = store.tool_calls(conversation_id)
    assert list(calls) == [reply]
    assert [c.call_id for c in calls[reply]] == ["call_1", "call_2"]
    first = calls[reply][0]
    assert first.result == "The secret word is periwinkle." and first.decision == "once"
    assert first.created_at and first.seconds == 0.25 and not first.is_error
    assert store.tool_calls(conversation_id, [reply + 100]) == {}
    store.delete_message(reply)
    assert store.tool_calls(conversation_id) == {}


def test_an_unknown_decision_or_message_is_refused(store, conversation_id):
    reply = _reply_with_calls(store, conversation_id)
    call = StoredToolCall("c", "tools", "t", "{}", "r", message_id=reply)
    with pytest.raises(ValueError, match="decision"):
        store.add_tool_call(StoredToolCall(**{**call.__dict__, "decision": "maybe"}))
    from app.core.store import NotFoundError

    with pytest.raises(NotFoundError):
        store.add_tool_call(StoredToolCall(**{**call.__dict__, "message_id": 9999}))


def test_export_carries_the_calls_and_the_round_trip_holds(store, conversation_id):
    # Imports replace partial settings by the defaults: a whole preset survives.
    store.update_conversation(
        conversation_id, preset="chat", settings=get_preset("chat").to_dict()
    )
    _reply_with_calls(store, conversation_id)
    exported = store.export_json(conversation_id)
    user, reply = exported["messages"]
    assert "tool_calls" not in user
    assert [c["tool"] for c in reply["tool_calls"]] == ["secret_word", "big_result"]
    assert reply["tool_calls"][1]["cut_note"] == "[Swapless cut this tool result]"
    again = store.export_json(store.import_json(json.dumps(exported)))
    exported.pop("exported_at"), again.pop("exported_at")
    assert again == exported


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda e: e["messages"][0].update(
                tool_calls=e["messages"][1]["tool_calls"]
            ),
            "not a reply",
        ),
        (lambda e: e["messages"][1]["tool_calls"][0].update(is_error="no"), "is_error"),
        (
            lambda e: e["messages"][1]["tool_calls"][0].update(decision="maybe"),
            "decision",
        ),
        (lambda e: e["messages"][1].update(tool_calls="x"), "tool_calls"),
    ],
)
def test_import_refuses_damaged_calls_and_saves_nothing(
    store, conversation_id, change, words
):
    _reply_with_calls(store, conversation_id)
    exported = store.export_json(conversation_id)
    change(exported)
    before = len(store.list_conversations())
    with pytest.raises(InputError, match=words):
        store.import_json(json.dumps(exported))
    assert len(store.list_conversations()) == before


def test_markdown_shows_each_call_with_its_result_and_cut_note(store, conversation_id):
    _reply_with_calls(store, conversation_id)
    text = store.export_markdown(conversation_id)
    assert "Tool call: tools · secret\\_word (result · 0.25 s)" in text
    assert "The secret word is periwinkle." in text
    # A result holding a code fence stays inside a longer one.
    assert "````\nLine 0 ```" in text
    assert "*\\[Swapless cut this tool result\\]*" in text


def test_a_database_from_before_tool_calls_opens_unchanged(tmp_path, clock):
    from sqlite_utils import Database

    path = tmp_path / "old.db"
    db = Database(path)
    migrations.migrate(db, up_to=6)  # the schema of the release before calls
    now = "2025-06-01T12:00:00.000000Z"
    db.execute(
        "INSERT INTO conversations (id, title, created_at, updated_at)"
        " VALUES (1, 'Old', ?, ?)",
        [now, now],
    )
    db.execute(
        "INSERT INTO messages (conversation_id, role, content, created_at)"
        " VALUES (1, 'user', 'hi', ?)",
        [now],
    )
    db.conn.commit()
    db.conn.close()
    with Store.open(path, clock=clock) as store:
        assert store.schema_version == SCHEMA_VERSION == 7
        assert [m.content for m in store.messages(1)] == ["hi"]
        assert store.tool_calls(1) == {}
        assert "tool_calls" not in store.export_json(1)["messages"][0]
