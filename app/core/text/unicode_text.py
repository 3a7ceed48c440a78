"""Text that cannot be encoded: found at the edges, named in one line.

Bytes that are not UTF-8 reach Python as lone surrogates: ``U+DC80``-``U+DCFF`` for a
byte decoded with ``surrogateescape`` (arguments, and stdin under a C locale), any
``U+D800``-``U+DFFF`` from a JSON ``\\ud800`` escape. A tokenizer fails on them deep
inside (or blames the chat template), so every edge that takes text from outside
(the CLI's stdin and arguments, the server's request bodies) asks `invalid_text`
first and refuses the text with its answer.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def invalid_text(text: str) -> str | None:
    """Say what makes ``text`` impossible to encode as UTF-8, or None if nothing does.

    Returns:
        For example ``"byte 0xff at character 7"`` (a byte that is not UTF-8) or
        ``"a lone surrogate U+D800 at character 0"`` (a JSON escape of half a pair).
    """
    found = _SURROGATE.search(text)
    if found is None:
        return None
    code = ord(found.group())
    if 0xDC80 <= code <= 0xDCFF:
        return f"byte 0x{code - 0xDC00:02x} at character {found.start()}"
    return f"a lone surrogate U+{code:04X} at character {found.start()}"


def decode_line(raw: bytes) -> tuple[str, str | None]:
    """Decode one line of input as UTF-8.

    Returns:
        The text (undecodable bytes kept as escapes) and what was wrong with it, or
        None when it is valid UTF-8.
    """
    text = raw.decode("utf-8", "surrogateescape")
    return text, invalid_text(text)
