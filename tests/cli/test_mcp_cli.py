"""`swapless mcp list` against a real stdio tool server (the tests' SDK server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "core" / "mcp" / "tool_server.py"


def _swapless(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWAPLESS_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )


def test_no_server_is_configured_at_first_start(tmp_path):
    result = _swapless("mcp", "list", home=tmp_path)
    assert result.returncode == 0
    assert "No tool servers configured" in result.stdout


def test_servers_and_their_tools_are_listed_without_secrets(tmp_path):
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "tools": {
                        "command": sys.executable,
                        "args": [str(SERVER)],
                        "env": {"TOKEN": "hunter2"},
                    },
                    "off": {"command": "never-started", "disabled": True},
                }
            }
        )
    )
    result = _swapless("mcp", "list", "--config", str(config), "--json", home=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)["servers"]
    assert {t["name"] for t in report["tools"]["tools"]} >= {
        "secret_word",
        "big_result",
    }
    assert report["tools"]["runs"].endswith("(environment: TOKEN)")
    assert "tools" not in report["off"]
    assert "hunter2" not in result.stdout + result.stderr


def test_a_bad_file_is_one_line_and_exit_2(tmp_path):
    config = tmp_path / "servers.json"
    config.write_text(
        json.dumps({"mcpServers": {"w": {"url": "http://example.com/x"}}})
    )
    result = _swapless("mcp", "list", "--config", str(config), home=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "must use https" in result.stderr
