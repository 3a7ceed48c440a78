"""The text layer of a PDF, page by page, with pypdf (pure Python, maintained).

A PDF holds text only if whoever made it kept a text layer: a scanned document is
pictures of pages, and reading it needs OCR first. That case gets a clear message
instead of an empty reading. Pages are parsed one at a time, so memory follows the
largest page rather than the file (pypdf reads objects from the file as they are
needed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

from app.core.errors import InputError

PAGE_BREAK = "\n\n"


def _reader(path: Path):
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    # pypdf logs every malformed object it repairs; a user gets one message instead.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(str(path))
        if reader.is_encrypted and not reader.decrypt(""):
            raise InputError(
                f"{path} is a password-protected PDF; save an unprotected copy and "
                "try again."
            )
        pages = len(reader.pages)
    except InputError:
        raise
    except (PdfReadError, OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path} is not a readable PDF ({exc}).") from exc
    return reader, pages


def pdf_pages(path: Path) -> Iterator[str]:
    """Yield the text of each page (pages are separated by a blank line).

    Raises:
        InputError: Not a readable PDF, or one protected by a password.
    """
    reader, pages = _reader(path)
    for number in range(pages):
        try:
            text = reader.pages[number].extract_text() or ""
        except Exception as exc:  # pypdf raises many kinds on a broken page
            raise InputError(
                f"{path}: page {number + 1} cannot be read ({type(exc).__name__}: "
                f"{exc})."
            ) from exc
        text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
        yield (PAGE_BREAK if number else "") + text


def no_text_layer_message(path: Path, pages: int) -> str:
    """The message for a PDF whose pages hold no text."""
    noun = "page" if pages == 1 else "pages"
    return (
        f"{path} has no text layer ({pages} {noun}, no text on any): it looks like a "
        "scanned PDF, which is pictures of pages. Run it through OCR first (for "
        "example ocrmypdf), or give a text, Markdown, HTML or DOCX version."
    )
