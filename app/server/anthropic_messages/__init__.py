"""Anthropic's Messages protocol (``POST /v1/messages``, ``/v1/messages/count_tokens``).

Claude Code and Anthropic's SDKs speak it. `messages_request` turns a body into the
server's protocol-neutral `ChatRequest` (content blocks into Hugging Face chat-template
messages, tools into `ToolSpec`s); `messages_response` turns the service's events back
into a ``message`` object or its server-sent events, and errors into Anthropic's shape.
May import `app.core.turn` and the server's neutral modules (`errors`, `events`,
`openai_chat.openai_request` for the request values); never Qt or MLX.
"""
