"""OpenAI's Responses protocol (``POST /v1/responses``), stateless: Codex speaks only this.

`responses_request` turns ``input`` items (messages, ``function_call``,
``function_call_output``, ``reasoning``) and function tools into the neutral
`ChatRequest`; `responses_response` turns the service's events into a ``response``
object or its streamed events. Nothing is stored: ``previous_response_id`` is refused
in words, ``store`` is answered ``false``. May import `app.core.turn` and the server's
neutral modules; never Qt or MLX.
"""
