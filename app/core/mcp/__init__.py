"""The MCP host: tool servers the model may use, configured by the user.

Servers are described in the `mcpServers` JSON shape LM Studio and Claude Desktop use
(`config.py`), started when first needed and stopped when Swapless quits (`host.py`,
built on the official `mcp` SDK: nothing of the protocol is written here), offered to
the model as `app.core.turn.parts.ToolSpec`s and answered with `ToolResult`s
(`tools.py`), run only with the user's consent (`consent.py`) and cut to the room the
memory budget leaves (`result_fit.py`).

Qt-free and MLX-free: may import `app.core.files`, `app.core.errors`, `app.core.turn`
and the `mcp` SDK; the window, the CLI and the chat loop use it.
"""
