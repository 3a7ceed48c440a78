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
MAX_PAGES = 50_000
"""Far beyond any real document; a file claiming more is refused, not walked."""


def _reader(path: Path):
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    # pypdf logs every malformed object it repairs; a user gets one message instead.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    from pypdf.errors import DependencyError

    try:
        reader = PdfReader(str(path))
        # Owner-password-only files (AES ones need `cryptography`) open with the
        # empty user password, as in every viewer.
        if reader.is_encrypted and not reader.decrypt(""):
            raise InputError(
                f"{path} is a password-protected PDF; save an unprotected copy and "
                "try again."
            )
        pages = _page_count(reader)
    except InputError:
        raise
    except DependencyError as exc:
        raise InputError(
            f"{path} is encrypted in a way this installation cannot open ({exc})."
        ) from exc
    except (PdfReadError, RecursionError, MemoryError) as exc:
        raise InputError(f"{path} is not a readable PDF ({_reason(exc)}).") from exc
    except Exception as exc:  # noqa: BLE001 - pypdf raises many kinds on a broken file
        raise InputError(f"{path} is not a readable PDF ({_reason(exc)}).") from exc
    if pages > MAX_PAGES:
        raise InputError(
            f"{path} has {pages:,} pages; at most {MAX_PAGES:,} can be read. Split it "
            "into smaller files."
        )
    return reader, pages


def _page_count(reader) -> int:
    """The page count the file declares, without walking its page tree."""
    root = reader.trailer["/Root"].get_object()
    declared = root["/Pages"].get_object().get("/Count")
    if isinstance(declared, int) and declared > MAX_PAGES:
        return int(declared)
    return len(reader.pages)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 200 else text[:199] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


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
                f"{path}: page {number + 1} cannot be read ({_reason(exc)})."
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
