"""Imports are validated like presets: hostile or damaged exports never land as-is.

An export is a file anyone can edit. Settings the conversation would continue with
(``kv_bits: 3``, ``max_context: 0``, unknown keys, a path-like preset name) are
replaced by the defaults with a note per replacement, so the conversation can always
be continued; a damaged structure is refused in one line and writes nothing.
"""

from __future__ import annotations

import json

import pytest

from app.core.errors import InputError
from app.core.presets.presets import get_preset, preset_from_dict


@pytest.fixture
def export(store, conversation_id) -> dict:
    store.update_conversation(
        conversation_id, preset="chat", settings=get_preset("chat").to_dict()
    )
    store.add_message(conversation_id, "user", "Hello")
    reply = store.begin_reply(conversation_id)
    store.finish_reply(reply, "Hi there.")
    return store.export_json(conversation_id)


def _changed(export: dict, change) -> dict:
    copy = json.loads(json.dumps(export))
    change(copy)
    return copy


def _continuable(store, conversation_id: int):
    """The preset a session would continue the conversation with (raises if none)."""
    conversation = store.get_conversation(conversation_id)
    return preset_from_dict(conversation.preset or "chat", conversation.settings)


def test_valid_settings_import_unchanged_without_notes(store, export):
    result = store.import_conversation(export)
    assert result.notes == ()
    assert (
        store.get_conversation(result.conversation_id).settings
        == (export["conversation"]["settings"])
    )


@pytest.mark.parametrize(
    ("change", "expected", "note"),
    [
        (lambda s: s.update(kv_bits=3), ("kv_bits", 8), "kv_bits must be one of"),
        (
            lambda s: s.update(max_context=0),
            ("max_context", 10000),
            "max_context must be between",
        ),
        (lambda s: s.update(temperature="hot"), ("temperature", 0.7), "a number"),
        (lambda s: s.update(evil=1), ("kv_bits", 8), "unknown setting(s) 'evil'"),
        (lambda s: s.pop("kv_group"), ("kv_group", 64), "missing setting(s) kv_group"),
    ],
    ids=["kv_bits-3", "max_context-0", "temperature-text", "unknown-key", "missing"],
)
def test_invalid_settings_are_replaced_by_defaults_saying_so(
    store, export, change, expected, note
):
    bad = _changed(export, lambda e: change(e["conversation"]["settings"]))
    result = store.import_conversation(bad)
    assert len(result.notes) == 1 and note in result.notes[0]
    preset = _continuable(store, result.conversation_id)
    key, value = expected
    assert getattr(preset, key) == value
    settings = store.get_conversation(result.conversation_id).settings
    assert "evil" not in settings
    # Everything else the export said is kept.
    assert preset.max_tokens == export["conversation"]["settings"]["max_tokens"]


@pytest.mark.parametrize(
    "name", ["../../etc/passwd", "/tmp/x", "Balanced", "a" * 100, 7, ""]
)
def test_a_preset_name_that_is_no_name_is_replaced(store, export, name):
    bad = _changed(export, lambda e: e["conversation"].update(preset=name))
    result = store.import_conversation(bad)
    assert any("is not a valid name" in note for note in result.notes)
    conversation = store.get_conversation(result.conversation_id)
    assert conversation.preset == "chat"
    _continuable(store, result.conversation_id)


def test_empty_settings_get_the_defaults_and_keep_the_system_prompt(store, export):
    bad = _changed(
        export,
        lambda e: e["conversation"].update(settings={}, system_prompt="Be terse."),
    )
    result = store.import_conversation(bad)
    assert result.notes
    preset = _continuable(store, result.conversation_id)
    assert preset.system_prompt == "Be terse." and preset.kv_bits == 8


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.update(conversation=[1, 2]), "conversation must be an object"),
        (lambda e: e.update(messages={"a": 1}), "messages must be a list"),
        (lambda e: e["messages"].append("hello"), r"messages\[2\] must be an object"),
        (lambda e: e["messages"][0].update(content=None), r"content must be text"),
        (lambda e: e["messages"][0].update(token_count=2**70), "too large"),
        (lambda e: e["messages"][0].update(token_count=-1), "at least 0"),
        (lambda e: e["messages"][0].update(summary=True), r"messages\[0\].summary"),
        (lambda e: e["messages"][1].update(stats=[1]), "stats must be an object"),
        (lambda e: e["messages"][1]["stats"].update(ttft_s="fast"), "ttft_s"),
        (lambda e: e["conversation"].update(model=["x"]), "model must be text"),
        (lambda e: e.update(version=True), "invalid format version"),
        (lambda e: e.update(documents=[{"name": 1}]), r"documents\[0\].name"),
        # Statistics (REAL columns): 2**63 crashed the insert, NaN and Infinity were
        # stored and exported again as non-standard JSON.
        (lambda e: e["messages"][1]["stats"].update(ttft_s=2**63), "ttft_s is too"),
        (lambda e: e["messages"][1]["stats"].update(ttft_s=2**70), "ttft_s is too"),
        (
            lambda e: e["messages"][1]["stats"].update(tokens_per_s=float("inf")),
            "tokens_per_s must be a finite number",
        ),
        (
            lambda e: e["messages"][1]["stats"].update(tokens_per_s=float("nan")),
            "tokens_per_s must be a finite number",
        ),
    ],
)
def test_a_damaged_structure_is_refused_in_one_line_and_writes_nothing(
    store, export, change, message
):
    before = store.db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0]
    with pytest.raises(InputError, match=message) as raised:
        store.import_conversation(_changed(export, change))
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 300
    assert (
        store.db.execute("SELECT COUNT(*) FROM conversations").fetchone()[0] == before
    )


def test_deeply_nested_json_is_refused_not_a_recursion_error(store):
    with pytest.raises(InputError, match="nested too deeply"):
        store.import_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="nested too deeply"):
        store.import_json('{"format": ' + '{"a": ' * 50_000 + "1" + "}" * 50_001)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_standard_json_numbers_are_refused(store, export, constant):
    text = json.dumps(export).replace(
        '"stats": {', f'"stats": {{"x_{constant}": 1, ', 1
    )
    text = text.replace(f'"x_{constant}": 1', f'"ttft_s": {constant}', 1)
    with pytest.raises(InputError, match=f"{constant} is not a number JSON allows"):
        store.import_json(text)
