"""Tool calls kept with the conversation: what a reply called, and what came back.

`tool_calls.py` holds the stored record (`StoredToolCall`) and the store's methods
for it (`ToolCallsMixin`, joined into `app.core.store.Store`). May import
`app.core.store.base` and `app.core.store.records`; never Qt or MLX.
"""
