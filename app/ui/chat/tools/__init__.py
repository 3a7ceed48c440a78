"""Tool calls in the chat window: the card that shows a call, its controller, and the
consent asked before an MCP tool runs.

`tool_call_card` is the view (the call's name and arguments, its result or error, the
consent buttons); `tool_card_controller` puts cards in the chat as the worker reports
calls; `tool_consent` carries a consent question from the generation thread to the
window and the answer back. May import `app.core` and `app.ui.common`; MCP itself is
in `app.core.mcp`.
"""
