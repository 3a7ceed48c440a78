"""The protocol-neutral shape of a turn beyond plain text: reasoning kept apart from the
answer, and tool calls with their results.

Every consumer — the CLI, the window, the OpenAI Chat / Responses and Anthropic
Messages adapters in `app.server`, the MCP host — translates these values; none of
them defines its own. No protocol's field names appear here.

Pure Python (standard library only); every other package may import it.
"""
