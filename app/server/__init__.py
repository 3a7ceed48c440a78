"""A local OpenAI-compatible server that keeps Swapless's memory promise.

Editors, agents and scripts speak the OpenAI Chat Completions protocol and resend the
whole conversation on every request. This package answers them on the app's one engine
(one model thread; requests queue): it maps each request onto the conversation cache
that already holds most of it, checks it against the budget before anything is
allocated, trims over-long histories like a chat (and remembers the trim for the
client's next request) or refuses them with the numbers, and stops a generation within
a token when its client goes away. Nothing here imports Qt or MLX.

Layers, outermost first: `local_server` (start/stop/status, the HTTP loop on its own
thread), `http_app` (Starlette routes, auth, limits, SSE), `admission` (what a request
may hold before it is parsed), `service/` (one request from messages to events, over
any protocol: trims and recalls remembered across requests, the cache each request
runs on, tools), `openai_chat/` (Chat Completions' shapes and client history). Agents'
protocols sit beside Chat Completions on the same service: `agent_routes` (their
routes), `anthropic_messages/`, `openai_responses/` and `completions/` (each
protocol's shapes), and `bridge` (events from a request's worker thread to the HTTP
loop, with keep-alive ticks).
"""
