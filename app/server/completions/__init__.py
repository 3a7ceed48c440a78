"""OpenAI's legacy Completions protocol (``POST /v1/completions``): a prompt continued.

Editors' autocomplete (Continue, Zed) sends raw text, not a chat, and with a ``suffix``
asks for the text in between (fill-in-the-middle) — done here with the tokenizer's own
FIM tokens, and refused in words for a model that has none. May import the server's
neutral modules and `app.core`; never Qt or MLX.
"""
