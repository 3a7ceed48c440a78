"""The MCP host: tool servers the model may use, configured by the user.

Servers are described in the `mcpServers` JSON shape LM Studio and Claude Desktop use
(`config.py`), started when first needed and stopped when Swapless quits (`host.py`,
built on the official `mcp` SDK: nothing of the protocol is written here), offered to
the model as `app.core.turn.parts.ToolSpec`s and answered with `ToolResult`s
(`catalog.py`), run only with the user's consent (`consent.py`) and cut to the room the
memory budget leaves (`result_fit.py`). Trust, the cap of calls per turn and the
servers each conversation enables are kept apart from the server file (`tool_prefs.py`).

Qt-free and MLX-free: may import `app.core.files`, `app.core.errors`, `app.core.turn`
and the `mcp` SDK; the window, the CLI and the chat loop use it.
"""
