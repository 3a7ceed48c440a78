"""The MCP host against real servers: a stdio subprocess and Streamable HTTP on loopback.

Every server here is `tool_server.py`, written with the official SDK and run as a real
process. The host must start it on first use, list and call its tools, turn every
failure (exit mid-call, no answer, garbage on stdout, a missing command) into words,
and leave no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from app.core.mcp.config import ServerConfig
from app.core.mcp.host import McpHost
from tests.core.mcp.loopback import tools_over_http

SERVER = Path(__file__).with_name("tool_server.py")


def _stdio(name: str = "tools", mode: str = "stdio") -> ServerConfig:
    return ServerConfig(name=name, command=sys.executable, args=(str(SERVER), mode))


def _server_children() -> list[psutil.Process]:
    return [
        p
        for p in psutil.Process().children(recursive=True)
        if any(str(SERVER) in part for part in (p.cmdline() or []))
    ]


@pytest.fixture
def host():
    with McpHost({"tools": _stdio()}, start_timeout_s=60, call_timeout_s=20) as h:
        yield h


def test_tools_are_listed_and_called_over_stdio(host):
    tools = {t.spec.name: t for t in host.list_tools("tools")}
    assert {"secret_word", "big_result", "exit_now", "hang", "fail"} <= set(tools)
    assert tools["secret_word"].spec.parameters["type"] == "object"
    outcome = host.call("tools", "secret_word", {"topic": "x"}, call_id="call_1")
    assert outcome.result.content == "The word is periwinkle."
    assert outcome.result.call_id == "call_1"
    assert not outcome.result.is_error
    big = host.call("tools", "big_result", {}, call_id="call_2")
    assert len(big.result.content) >= 200_000


def test_a_tool_error_comes_back_as_an_error_result(host):
    outcome = host.call("tools", "fail", {"reason": "disk on fire"}, call_id="c")
    assert outcome.result.is_error
    assert "disk on fire" in outcome.result.content


def test_a_server_that_exits_mid_call_is_words_and_can_start_again(host):
    outcome = host.call("tools", "exit_now", {}, call_id="c")
    assert outcome.result.is_error
    assert "tools" in outcome.result.content
    # The next call starts the server anew.
    again = host.call("tools", "secret_word", {}, call_id="d")
    assert "periwinkle" in again.result.content


def test_a_call_that_never_answers_times_out_and_stop_ends_it_sooner():
    with McpHost({"tools": _stdio()}, start_timeout_s=60, call_timeout_s=2) as h:
        h.start("tools")
        outcome = h.call("tools", "hang", {}, call_id="c")
        assert outcome.result.is_error
        assert "did not answer within 2 s" in outcome.result.content
    with McpHost({"tools": _stdio()}, start_timeout_s=60, call_timeout_s=60) as h:
        h.start("tools")
        asked = time.monotonic()
        outcome = h.call(
            "tools",
            "hang",
            {},
            call_id="c",
            cancelled=lambda: time.monotonic() > asked + 0.5,
        )
        assert outcome.result.is_error
        assert "stopped" in outcome.result.content
        assert outcome.seconds < 30


def test_garbage_on_stdout_and_a_missing_command_are_words():
    servers = {
        "garbage": _stdio("garbage", "garbage"),
        "missing": ServerConfig(name="missing", command="/nonexistent/tool-server"),
    }
    with McpHost(servers, start_timeout_s=30, call_timeout_s=10) as h:
        # A server that writes a line of garbage before speaking MCP still works,
        # or fails in words; it never raises anything but a ToolServerError.
        outcome = h.call("garbage", "secret_word", {}, call_id="c")
        assert "periwinkle" in outcome.result.content or outcome.result.is_error
        missing = h.call("missing", "secret_word", {}, call_id="c")
        assert missing.result.is_error
        assert "missing" in missing.result.content
        unknown = h.call("nope", "x", {}, call_id="c")
        assert "no tool server named 'nope'" in unknown.result.content


def test_close_leaves_no_server_process():
    h = McpHost({"tools": _stdio()}, start_timeout_s=60, call_timeout_s=20)
    h.start("tools")
    children = _server_children()
    assert children, "the stdio server should be a child process"
    h.close()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert alive == []


def test_servers_stop_when_the_swapless_process_is_killed(tmp_path):
    # kill -9 gives no chance to clean up: the server must still go (its stdin closes).
    script = tmp_path / "host.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            from app.core.mcp.config import ServerConfig
            from app.core.mcp.host import McpHost
            h = McpHost({{"t": ServerConfig(name="t", command=sys.executable,
                        args=({str(SERVER)!r}, "stdio"))}}, start_timeout_s=60)
            h.start("t")
            print("started", flush=True)
            time.sleep(600)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        servers = [
            p
            for p in psutil.Process(proc.pid).children(recursive=True)
            if str(SERVER) in " ".join(p.cmdline())
        ]
        assert servers
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        gone, alive = psutil.wait_procs(servers, timeout=15)
        assert alive == []
    finally:
        if proc.poll() is None:
            proc.kill()


def test_tools_over_streamable_http_on_loopback():
    with tools_over_http() as url:
        config = ServerConfig(name="web", url=url)
        with McpHost({"web": config}, start_timeout_s=30, call_timeout_s=20) as h:
            names = {t.spec.name for t in h.list_tools("web")}
            assert "secret_word" in names
            outcome = h.call("web", "secret_word", {}, call_id="c")
            assert "periwinkle" in outcome.result.content
