"""The tool preferences file: defaults, a strict read, private writes; server fields."""

from __future__ import annotations

import json
import stat

import pytest

from app.core.errors import ToolServerError
from app.core.mcp.config import ServerConfig
from app.core.mcp.tool_prefs import (
    ToolPrefs,
    load_prefs,
    prefs_path,
    save_prefs,
    server_from_fields,
)


def test_nothing_is_trusted_or_enabled_at_first():
    prefs = load_prefs()
    assert prefs == ToolPrefs() and prefs.enabled_for(None) == ()
    assert prefs.enabled_for(3) == () and prefs.max_calls == 10


def test_prefs_round_trip_privately():
    prefs = ToolPrefs(frozenset({"a/t"}), 3, {5: ("a",)}, ("b",)).with_enabled(6, ["a"])
    save_prefs(prefs)
    assert stat.S_IMODE(prefs_path().stat().st_mode) == 0o600
    again = load_prefs()
    assert again == prefs
    assert again.enabled_for(5) == ("a",) and again.enabled_for(9) == ("b",)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([], "JSON object"),
        ({"max_calls": 0}, "from 1 to 100"),
        ({"max_calls": True}, "whole number"),
        ({"trusted": "a/t"}, "trusted must be a list"),
        ({"conversations": {"x": ["a"]}}, "not an id"),
    ],
)
def test_a_wrong_value_is_named(data, words):
    prefs_path().write_text(json.dumps(data))
    with pytest.raises(ToolServerError, match=words):
        load_prefs()


def test_server_fields_make_a_checked_server():
    stdio = server_from_fields("files", 'npx -y "my server"')
    assert stdio.command == "npx" and stdio.args == ("-y", "my server")
    http = server_from_fields("web", "https://example.com/mcp", disabled=True)
    assert http.url == "https://example.com/mcp" and http.disabled
    kept = ServerConfig("files", command="old", env={"K": "v"}, cwd="/tmp")
    edited = server_from_fields("files", "new", keep=kept)
    assert dict(edited.env) == {"K": "v"} and edited.cwd == "/tmp"
    for name, runs, words in (
        ("web", "http://example.com/mcp", "https"),
        ("bad name!", "x", "server name"),
        ("files", "", "non-empty"),
        ("files", 'say "unclosed', "cannot be read"),
    ):
        with pytest.raises(ToolServerError, match=words):
            server_from_fields(name, runs)
