"""The tool-server file: LM Studio's `mcpServers` shape, read strictly, written private."""

from __future__ import annotations

import json
import stat

import pytest

from app.core.errors import ToolServerError
from app.core.mcp.config import load_config, parse_config, save_config


def test_stdio_and_http_servers_in_lm_studios_shape():
    servers = parse_config(
        {
            "mcpServers": {
                "files": {
                    "command": "npx",
                    "args": ["-y", "some server"],
                    "env": {"API_KEY": "s3cret"},
                },
                "search": {
                    "url": "https://tools.example.com/mcp",
                    "headers": {"Authorization": "Bearer t0ken"},
                },
                "local": {"url": "http://127.0.0.1:9000/mcp"},
            }
        }
    )
    assert servers["files"].transport == "stdio"
    assert servers["files"].args == ("-y", "some server")
    assert servers["search"].transport == "http"
    # What the user sees before the first start: the whole command, no secret value.
    shown = servers["files"].describe()
    assert shown == 'npx -y "some server" (environment: API_KEY)'
    assert "s3cret" not in shown
    assert "t0ken" not in servers["search"].describe()


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"url": "http://tools.example.com/mcp"}, "must use https"),
        ({"url": "ftp://x/mcp"}, "http(s) URL"),
        ({"command": ""}, "non-empty"),
        ({"command": "x", "args": "not a list"}, "args must be a list"),
        ({"command": "x", "env": {"A": 1}}, "env must be an object of string"),
        ({"command": "x", "colour": "red"}, "unknown key 'colour'"),
        ({"args": []}, "needs a 'command'"),
    ],
)
def test_bad_entries_are_refused_naming_the_key(entry, words):
    with pytest.raises(ToolServerError, match=r"mcpServers\.srv") as info:
        parse_config({"mcpServers": {"srv": entry}})
    assert words in str(info.value)


def test_no_file_means_no_servers_and_the_saved_file_is_private(tmp_path):
    path = tmp_path / "mcp.json"
    assert load_config(path) == {}
    servers = parse_config({"mcpServers": {"a": {"command": "x", "env": {"K": "v"}}}})
    save_config(servers, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_config(path) == servers
    path.write_text("{not json")
    with pytest.raises(ToolServerError, match="cannot be read as JSON"):
        load_config(path)
    path.write_text(json.dumps({"mcpServers": []}))
    with pytest.raises(ToolServerError, match="mcpServers must be an object"):
        load_config(path)
