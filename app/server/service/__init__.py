"""The protocol-neutral completion service: one request from messages to events.

Every protocol adapter (OpenAI Chat and Completions, Responses, Anthropic Messages)
fills a `ChatRequest` and runs it here. `completion` holds `CompletionService` (the
budget check, the trim rounds, recall, the cache a request runs on); around it:
`request_prompts` (the prompt rendered and counted, tools in the template or folded
by `tool_prompt`), `history_trim` and `history_recall` (trims and recalls remembered
across requests), `conversation_index` (which cache a request continues),
`reply_stream` (the engine's events as the server's, cut by `stop_sequences`),
`tool_paths` (a request's tool fields as the engine's `TurnTools`), `refusals` and
`served_model`. May import `app.core` and the server's neutral modules (`errors`,
`events`, `openai_chat`'s request shapes); never Qt or MLX.
"""
