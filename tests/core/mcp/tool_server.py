"""A real MCP server for the tests, written with the official SDK.

Run as ``python tool_server.py stdio`` (speaks MCP on stdin/stdout) or
``python tool_server.py http PORT`` (Streamable HTTP on 127.0.0.1). ``garbage`` mode
writes a line that is not JSON-RPC before serving stdio, as a broken server would.
Tools: a secret word, a 200 KB result, a call that makes the server exit, a call that
never answers, and one that reports an error.
"""

from __future__ import annotations

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

SECRET_WORD = "periwinkle"
BIG_RESULT_BYTES = 200_000

server = MCPServer("swapless-test-tools")


@server.tool()
def secret_word(topic: str = "") -> str:
    """Return the secret word of the day."""
    # Worded so that no three tokens of it repeat the question ("What is the secret
    # word?") or this description: the reference model's copy circuit continues the
    # last three tokens it wrote, and "The secret word is periwinkle." was answered
    # "The secret word?" (docs/reference-model.md, "Tool calls").
    return f"The word is {SECRET_WORD}."


@server.tool()
def big_result() -> str:
    """Return about 200 KB of numbered lines."""
    lines, size, n = [], 0, 0
    while size < BIG_RESULT_BYTES:
        line = f"Line {n}: the quick brown fox jumps over the lazy dog."
        lines.append(line)
        size += len(line) + 1
        n += 1
    return "\n".join(lines)


@server.tool()
def exit_now() -> str:
    """Exit the server process in the middle of the call."""
    os._exit(3)


@server.tool()
def hang() -> str:
    """Never answer (until the process is stopped)."""
    while True:
        time.sleep(1)


@server.tool()
def fail(reason: str = "broken") -> str:
    """Raise an error the tool reports."""
    raise ToolError(f"the tool failed: {reason}")


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        if mode == "garbage":
            sys.stdout.write("this is not JSON-RPC\n")
            sys.stdout.flush()
        server.run("stdio")
