"""A local OpenAI-compatible server that keeps Swapless's memory promise.

Editors, agents and scripts speak the OpenAI Chat Completions protocol and resend the
whole conversation on every request. This package answers them on the app's one engine
(one model thread; requests queue): it maps each request onto the conversation cache
that already holds most of it, checks it against the budget before anything is
allocated, trims over-long histories like a chat (and remembers the trim for the
client's next request) or refuses them with the numbers, and stops a generation within
a token when its client goes away. Nothing here imports Qt or MLX.

Layers, outermost first: `local_server` (start/stop/status, the HTTP loop on its own
thread), `http_app` (Starlette routes, auth, limits, SSE), `completion` (one request
from messages to events), `client_history` and `conversation_index` (trims remembered
across requests, the cache each request runs on), `openai_request` and
`openai_response` (the protocol's shapes). Agents' protocols sit beside Chat
Completions on the same service: `agent_routes` (their routes), `anthropic_messages/`,
`openai_responses/` and `completions/` (each protocol's shapes), `bridge` (events from
a request's worker thread to the HTTP loop, with keep-alive ticks) and `tool_prompt`
(tools in the system turn until the engine renders them).
"""
