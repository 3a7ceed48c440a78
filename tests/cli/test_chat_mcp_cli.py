"""`swapless chat --mcp CONFIG`: tools in the terminal chat, as a user runs it.

A real subprocess with the tiny random-weight model in the reference format, a real
SDK tool server over stdio. The model cannot choose a tool, so ``--tool-choice
secret_word`` makes its first reply call it (the same option a user has); with a
model that calls tools by itself, dropping that option is the only change.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.store import Store

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "tests" / "core" / "mcp" / "tool_server.py"


@pytest.fixture
def config(tmp_path) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "tools": {"command": sys.executable, "args": [str(SERVER)]}
                }
            }
        )
    )
    return path


def _chat(model: Path, home: Path, *args: str, stdin: str = "Secret?\n"):
    env = {**os.environ, "SWAPLESS_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "app", "chat", "--model", str(model), *_FLAGS, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


_FLAGS = ("--max-tokens", "48", "--temp", "0", "--thinking", "off", "--seed", "0")


def _calls(home: Path) -> list:
    with Store.open(home / "swapless.db") as store:
        conversation = store.list_conversations()[0]
        made = store.tool_calls(conversation.id)
    return [call for calls in made.values() for call in calls]


def test_an_allowed_tool_runs_and_its_result_is_stored(
    thinking_model_dir, swapless_home, config
):
    result = _chat(
        thinking_model_dir(),
        swapless_home,
        "--mcp",
        str(config),
        "--allow-tools",
        "secret_word",
        "--tool-choice",
        "secret_word",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    turn = json.loads(result.stdout.splitlines()[0])
    assert turn["tool_calls"] == 1
    # The full command is said before the server starts.
    assert f"[starting tool server tools: {sys.executable}" in result.stderr
    (call,) = _calls(swapless_home)
    assert call.decision == "trusted" and "periwinkle" in call.result


def test_without_a_terminal_other_tools_are_denied_and_the_model_is_told(
    thinking_model_dir, swapless_home, config
):
    result = _chat(
        thinking_model_dir(),
        swapless_home,
        "--mcp",
        str(config),
        "--tool-choice",
        "secret_word",
    )
    assert result.returncode == 0, result.stderr
    assert "calls not in --allow-tools are denied" in result.stderr
    assert "[tool call secret_word denied: the model is told so]" in result.stderr
    (call,) = _calls(swapless_home)
    assert call.decision == "deny" and call.is_error
    assert "did not allow" in call.result


def test_on_a_terminal_the_user_is_asked(thinking_model_dir, swapless_home, config):
    env = {**os.environ, "SWAPLESS_HOME": str(swapless_home), "PYTHONPATH": str(ROOT)}
    main, secondary = pty.openpty()
    command = [sys.executable, "-m", "app", "chat", "--model"]
    process = subprocess.Popen(
        [
            *command,
            str(thinking_model_dir()),
            *_FLAGS,
            "--mcp",
            str(config),
            "--tool-choice",
            "secret_word",
        ],
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(secondary)
    # The message, then "a" (always) at the consent prompt, then Ctrl+D to leave.
    os.write(main, b"Secret?\na\n\x04")
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        os.close(main)
    assert process.returncode == 0, stderr.decode()
    text = stderr.decode()
    assert "[tool call: tools · secret_word" in text and "allow [y/a/n]>" in text
    assert "tool result" in text and "periwinkle" in text
    (call,) = _calls(swapless_home)
    assert call.decision == "always" and "periwinkle" in call.result


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--mcp", "{missing}"), "is not a file"),
        (("--mcp", "{bad}"), "must use https"),
        (("--mcp", "{config}", "--allow-tools", "nope"), "offers 'nope'"),
        (("--allow-tools", "secret_word"), "need --mcp"),
    ],
)
def test_bad_tool_options_are_one_line_and_exit_2(
    tiny_model_dir, swapless_home, config, tmp_path, args, words
):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"w": {"url": "http://example.com/x"}}}))
    names = {"missing": tmp_path / "none.json", "bad": bad, "config": config}
    filled = [a.format(**names) for a in args]
    result = _chat(tiny_model_dir, swapless_home, *filled)
    assert result.returncode == 2, result.stderr
    # One line says what is wrong (a server may have been started, and said so).
    errors = [
        line for line in result.stderr.splitlines() if line.startswith("swapless")
    ]
    assert len(errors) == 1 and words in errors[0]


def test_the_reference_model_calls_the_tool_by_itself_and_answers_with_its_word(
    tmp_path, swapless_home, config
):
    """Nothing forced: the shipped model writes the call, the script allows it."""
    from app.core.modelkit.reference.install import install_reference_model

    result = _chat(
        install_reference_model(tmp_path / "reference"),
        swapless_home,
        "--mcp",
        str(config),
        "--allow-tools",
        "secret_word",
        stdin="What is the secret word?\n",
    )
    assert result.returncode == 0, result.stderr
    assert "[tool call: tools · secret_word" in result.stderr
    assert "periwinkle" in result.stdout
    (call,) = _calls(swapless_home)
    assert call.tool == "secret_word" and call.decision == "trusted"
