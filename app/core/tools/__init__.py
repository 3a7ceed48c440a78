"""Tool calling and structured output, as pure policy: no Qt, no MLX.

What lives here: checking the tools a request offers (`tool_specs`: names, JSON
schemas, size limits), what the caller asked of them (`tool_choice`), the streaming
splitter that takes a model's output apart into answer text and tool calls in the
model's own markup (`call_stream`), and the grammars that constrain decoding to a JSON
schema or to a well-formed call (`grammar`, built on llguidance, which needs no MLX).

The engine (`app.core.engine.tool_hooks`) supplies the model-specific parts — the
call markers and parser mlx-lm's tokenizer wrapper infers, the token ids — and runs
the hooks on its thread. May import `app.core.turn`, `app.core.errors`, the standard
library, ``jsonschema`` and ``llguidance``.
"""
