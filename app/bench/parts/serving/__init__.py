"""Parts that measure Swapless as a server: the OpenAI-compatible endpoint against the
engine (`server`), an agent session replayed against `mlx_lm.server` (`agent_session`),
and structured output and tool definitions (`structured`).

May import `app.server`, the engine and `app.bench` helpers; the product never imports
them.
"""
