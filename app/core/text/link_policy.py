"""Which link targets a reply may open: the one rule the renderer and the view share.

A reply is untrusted text. Only web and mail addresses become clickable links, and only
a click opens them (in the desktop's browser or mail program). Relative paths,
``javascript:``, ``file:``, ``data:`` and every other scheme stay inert text, so a reply
can neither reach local files nor run anything.
"""

from __future__ import annotations

OPENABLE_SCHEMES = ("http", "https", "mailto")


def is_openable(url: str) -> bool:
    """Whether ``url`` may become a clickable link (an absolute http, https or mailto URL)."""
    scheme, colon, rest = url.strip().partition(":")
    if not colon or not rest:
        return False
    if scheme.lower() not in OPENABLE_SCHEMES:
        return False
    if scheme.lower() == "mailto":
        return True
    return rest.startswith("//") and len(rest.lstrip("/")) > 0
