"""JSON export/import round trips; Markdown export reads well.

Round-trip equality, as promised in ``app/core/store/exchange/export.py``: exporting an
imported export gives the same dict, key for key, except ``exported_at``; the only
value that may change is a ``generating`` reply (or ``reading`` document), which
comes back ``interrupted``. Ids never appear in an export, so new ids on import
cannot make a difference.
"""

from __future__ import annotations

import json

import pytest

from app.core.errors import InputError
from app.core.presets.presets import get_preset
from app.core.store import FORMAT, FORMAT_VERSION, ReplyStats

STATS = ReplyStats(
    prompt_tokens=300,
    generated_tokens=42,
    reused_tokens=256,
    ttft_s=0.125,
    tokens_per_s=37.5,
    peak_memory_bytes=2_147_483_648,
    kv_bits=4,
)


def _with_chat_settings(store, conversation_id) -> int:
    """Give a conversation the settings a real session stores: a whole, valid preset.

    (Imports replace invalid or partial settings by the defaults, so only valid ones
    survive a round trip unchanged.)
    """
    store.update_conversation(
        conversation_id, preset="chat", settings=get_preset("chat").to_dict()
    )
    return conversation_id


@pytest.fixture
def rich_conversation(store, conversation_id) -> int:
    """A conversation using every feature the export has to carry."""
    _with_chat_settings(store, conversation_id)
    ids = []
    for i in range(3):
        ids.append(
            store.add_message(conversation_id, "user", f"Question {i} — ünïcode ✨")
        )
        reply = store.begin_reply(conversation_id)
        store.finish_reply(reply, f"Answer {i}\n\nwith a second paragraph.", STATS)
        ids.append(reply)
    store.add_summary(
        conversation_id, ids[0], ids[1], "First exchange.", 6, "extractive"
    )
    store.add_summary(
        conversation_id,
        ids[0],
        ids[3],
        "First two exchanges.",
        9,
        "model",
        cause="pressure",
        limit_tokens=4096,
        trim_at_tokens=3072,
    )
    stopped = store.begin_reply(conversation_id)
    store.finish_reply(stopped, "Cut sho", STATS, stopped=True)
    failed = store.begin_reply(conversation_id)
    store.fail_reply(failed, "", "Model too large for memory")
    document_id = store.add_document(
        conversation_id, "report.txt", 123_456, "ab" * 32, 1024, 3
    )
    store.save_segment(document_id, 0, 1024, "Segment one notes.", tokens_per_s=50.5)
    store.save_segment(document_id, 1, 1024, "Segment two notes.", kv_bytes=4096)
    store.set_document_status(document_id, "interrupted")
    store.add_document(conversation_id, "empty.txt", 0, "cd" * 32, 1024, None)
    store.set_document_status(
        store.documents(conversation_id)[-1].id, "error", "Empty file"
    )
    return conversation_id


def _without_exported_at(export: dict) -> dict:
    return {key: value for key, value in export.items() if key != "exported_at"}


def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_export_format_is_versioned_and_free_of_ids(store, rich_conversation):
    export = store.export_json(rich_conversation)
    assert (
        (export["format"], export["version"])
        == (FORMAT, FORMAT_VERSION)
        == (
            "swapless-conversation",
            1,
        )
    )
    assert not {key for key in _keys(export) if key == "id" or key.endswith("_id")}
    assert export["conversation"]["settings"] == get_preset("chat").to_dict()
    assert [s["superseded_by"] for s in export["summaries"]] == [1, None]
    assert [(s["first_message"], s["last_message"]) for s in export["summaries"]] == [
        (0, 1),
        (0, 3),
    ]
    assert [m["summary"] for m in export["messages"]] == [
        1,
        1,
        1,
        1,
        None,
        None,
        None,
        None,
    ]
    assert [m["state"] for m in export["messages"][-2:]] == ["interrupted", "error"]
    assert export["messages"][1]["stats"] == STATS.as_dict()
    assert [len(d["segments"]) for d in export["documents"]] == [2, 0]
    json.dumps(export)  # serialisable as it is


def test_export_import_export_is_equal(store, rich_conversation):
    original = store.export_json(rich_conversation)
    imported_id = store.import_json(json.dumps(original))
    assert imported_id != rich_conversation
    again = store.export_json(imported_id)
    assert _without_exported_at(again) == _without_exported_at(original)


def test_imported_conversation_behaves_like_the_original(store, rich_conversation):
    imported_id = store.import_json(store.export_json(rich_conversation))
    original_context = store.context_for_model(rich_conversation)
    imported_context = store.context_for_model(imported_id)

    def shape(context):
        return [(type(e).__name__, e.content) for e in context.entries]

    assert shape(imported_context) == shape(original_context)
    original_ids = {
        m.id for m in store.messages(rich_conversation, include_trimmed=True)
    }
    imported = store.messages(imported_id, include_trimmed=True)
    assert not original_ids & {m.id for m in imported}
    assert {m.summary_id for m in imported if m.trimmed} == {
        imported_context.summaries[0].id
    }
    assert any(h.conversation_id == imported_id for h in store.search("ünïcode"))


def test_generating_reply_is_imported_as_interrupted(store, conversation_id):
    _with_chat_settings(store, conversation_id)
    store.add_message(conversation_id, "user", "hi")
    reply = store.begin_reply(conversation_id)
    store.update_reply_text(reply, "Hel")
    store.add_document(conversation_id, "a.txt", 1, "ab" * 32, 64, 2)
    original = store.export_json(conversation_id)
    again = store.export_json(store.import_json(original))
    assert original["messages"][1]["state"] == "generating"
    assert again["messages"][1]["state"] == "interrupted"
    assert again["messages"][1]["content"] == "Hel"
    assert again["documents"][0]["status"] == "interrupted"
    original["messages"][1]["state"] = "interrupted"
    original["documents"][0]["status"] = "interrupted"
    assert _without_exported_at(again) == _without_exported_at(original)


def _damaged(export: dict, change) -> dict:
    copy = json.loads(json.dumps(export))
    change(copy)
    return copy


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda e: e.update(format="something-else"),
            "not a Swapless conversation export",
        ),
        (lambda e: e.update(version=2), "newer version of Swapless"),
        (lambda e: e.update(version="1"), "invalid format version"),
        (lambda e: e.pop("messages"), "damaged or incomplete"),
        (lambda e: e["messages"][0].update(role="robot"), "messages\\[0\\].role"),
        (lambda e: e["messages"][0].update(state="done"), "messages\\[0\\].state"),
        (lambda e: e["messages"][0].update(summary=7), "messages\\[0\\].summary"),
        (lambda e: e["summaries"][0].update(last_message=99), "last_message"),
        (lambda e: e["summaries"][0].update(first_message=3), "invalid message span"),
        (lambda e: e["summaries"][1].update(cause="boredom"), "summaries\\[1\\].cause"),
        (lambda e: e["summaries"][1].update(limit_tokens=-5), "limit_tokens"),
        (lambda e: e["conversation"].update(created_at="yesterday"), "damaged"),
        (lambda e: e["conversation"].update(settings=[1, 2]), "settings"),
        (lambda e: e["conversation"].update(title=None), "damaged"),
        (lambda e: e["documents"][0]["segments"][1].update(segment_index=0), "damaged"),
    ],
)
def test_bad_imports_raise_input_error_and_write_nothing(
    store, rich_conversation, change, message
):
    export = _damaged(store.export_json(rich_conversation), change)
    before = store.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    with pytest.raises(InputError, match=message):
        store.import_json(export)
    assert [c.id for c in store.list_conversations()] == [rich_conversation]
    assert store.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == before


def test_import_rejects_text_that_is_not_json(store):
    with pytest.raises(InputError, match="not valid JSON"):
        store.import_json("{not json")
    with pytest.raises(InputError, match="not a Swapless conversation export"):
        store.import_json("[1, 2, 3]")


EXPECTED_MARKDOWN = """\
# Test chat

- **Created:** 2025-06-01 12:00:02 UTC
- **Updated:** 2025-06-01 12:00:11 UTC
- **Model:** `mlx-community/tiny`
- **Preset:** Balanced
- **Settings:** `{"temperature": 0.7}`

## System prompt

Be brief.

## Messages

> **Summary 1** (extracted from the text, replaces messages 1–2)
>
> The user said hello.
> The assistant answered.

### 1. User · 2025-06-01 12:00:03 UTC

*Replaced by summary 1 in the model's context.*

Hello

### 2. Assistant · 2025-06-01 12:00:04 UTC

*Replaced by summary 1 in the model's context.*

Hi there.

*300 prompt tokens · 256 reused · 42 generated · first token 0.12 s · 37.5 tok/s · \
peak memory 2.0 GB · 4-bit KV cache*

### 3. User · 2025-06-01 12:00:07 UTC

Tell me more

### 4. Assistant · 2025-06-01 12:00:08 UTC (error)

*(empty)*

**Error:** Out of memory

## Documents

### notes.txt

2.0 KB · 1 of 2 segments of 512 tokens · reading · sha256 `\
abababababababababababababababababababababababababababababababab`

#### Segment 1 (512 tokens)

The notes.
"""


def test_markdown_export(store, conversation_id):
    hello = store.add_message(conversation_id, "user", "Hello")
    reply = store.begin_reply(conversation_id)
    store.finish_reply(reply, "Hi there.", STATS)
    store.add_summary(
        conversation_id,
        hello,
        reply,
        "The user said hello.\nThe assistant answered.",
        9,
        "extractive",
    )
    store.add_message(conversation_id, "user", "Tell me more")
    failed = store.begin_reply(conversation_id)
    store.fail_reply(failed, "", "Out of memory")
    document_id = store.add_document(
        conversation_id, "notes.txt", 2048, "ab" * 32, 512, 2
    )
    store.save_segment(document_id, 0, 512, "The notes.")
    assert store.export_markdown(conversation_id) == EXPECTED_MARKDOWN


def test_markdown_of_an_empty_conversation(store):
    conversation_id = store.create_conversation()
    assert store.export_markdown(conversation_id) == (
        "# Untitled conversation\n\n"
        "- **Created:** 2025-06-01 12:00:02 UTC\n"
        "- **Updated:** 2025-06-01 12:00:02 UTC\n"
    )


def test_markdown_shows_folded_summaries(store, rich_conversation):
    markdown = store.export_markdown(rich_conversation)
    assert (
        "> **Summary 1** (extracted from the text, replaces messages 1–2; later folded"
        in (markdown)
    )
    assert "> **Summary 2** (written by the model, replaces messages 1–4)" in markdown
    assert (
        markdown.index("**Summary 1**")
        < markdown.index("**Summary 2**")
        < markdown.index("### 1. User")
    )
    assert "### 7. Assistant · 2025-06-01" in markdown and "(interrupted)" in markdown
    assert "**Error:** Empty file" in markdown


def test_a_trim_cause_survives_export_and_import(store, rich_conversation):
    imported = store.import_json(store.export_json(rich_conversation))
    folded, active = store.summaries(imported, include_superseded=True)
    assert (active.cause, active.limit_tokens, active.trim_at_tokens) == (
        "pressure",
        4096,
        3072,
    )
    assert folded.cause is None  # written without a cause: stays unknown


def test_an_export_from_before_trim_causes_imports(store, rich_conversation):
    export = store.export_json(rich_conversation)
    for summary in export["summaries"]:
        for key in ("cause", "limit_tokens", "trim_at_tokens"):
            del summary[key]
    imported = store.import_json(export)
    assert all(s.cause is None for s in store.summaries(imported))
