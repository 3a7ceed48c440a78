"""The OpenAI Chat Completions protocol: parsing requests, rendering responses and stream
chunks, and reading a client's message history. It translates to and from the protocol-
neutral service in `app.server`.

May import `app.server` and `app.core`; no protocol's field names leave this folder.
"""
