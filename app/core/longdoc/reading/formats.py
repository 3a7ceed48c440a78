"""Which kind of document a file is, and the words for files Swapless cannot read.

Text, Markdown and source code are read as text; HTML, PDF and Word .docx have
readers of their own. The kind comes from the file's first bytes where they say it
(a PDF named ``.txt`` is still a PDF) and from its name otherwise. Files that are
clearly something else — images, audio, archives, other office formats — are refused
by name with what to do instead, before any of them is read.
"""

from __future__ import annotations

from pathlib import Path

from app.core.errors import InputError

TEXT, HTML, PDF, DOCX = "text", "html", "pdf", "docx"
KINDS = (TEXT, HTML, PDF, DOCX)
SUPPORTED = "text, Markdown, source code, HTML, PDF (with a text layer) and Word .docx"

HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
_UNSUPPORTED = {
    "an image": ".png .jpg .jpeg .gif .bmp .tif .tiff .webp .heic .heif .ico .psd",
    "audio or video": ".mp3 .wav .flac .ogg .m4a .aac .mp4 .mov .avi .mkv .webm",
    "an archive": ".zip .gz .tgz .bz2 .xz .7z .rar .tar .zst",
    "a spreadsheet": ".xls .xlsx .ods .numbers",
    "a presentation": ".ppt .pptx .odp .key",
    "a program or library": ".exe .dll .so .dylib .bin .app .dmg .iso .class .pyc .o",
    "an e-book": ".epub .mobi .azw .azw3",
}
_HINTS = {
    ".doc": "an old Word .doc file: save it as .docx (or PDF) and try again.",
    ".odt": "an OpenDocument text: save it as .docx (or PDF) and try again.",
    ".rtf": "a Rich Text file: save it as .docx (or plain text) and try again.",
    ".pages": "a Pages document: export it as .docx or PDF and try again.",
}
_MAGIC = (
    (b"\x89PNG", "an image"),
    (b"\xff\xd8\xff", "an image"),
    (b"GIF8", "an image"),
    (b"\x1f\x8b", "an archive"),
    (b"7z\xbc\xaf", "an archive"),
    (b"Rar!", "an archive"),
    (b"\xd0\xcf\x11\xe0", "an old Office file (.doc, .xls or .ppt)"),
    (b"\x7fELF", "a program or library"),
    (b"MZ", "a program or library"),
)


def detect_kind(path: Path, head: bytes) -> str:
    """Return the kind of ``path`` from its first bytes and its name.

    Args:
        path: The file.
        head: Its first bytes (a few hundred are enough).

    Raises:
        InputError: A kind Swapless does not read, named, with what to do.
    """
    suffix = path.suffix.lower()
    if head.startswith(b"%PDF-"):
        return PDF
    if head.startswith(b"PK\x03\x04"):
        if suffix == ".docx":
            return DOCX
        what = _kind_of_suffix(suffix) or "a ZIP archive (or an Office file)"
        raise _refusal(path, what)
    if suffix in _HINTS:
        raise InputError(f"{path} is {_HINTS[suffix]}")
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise _refusal(path, what)
    if kind := _kind_of_suffix(suffix):
        raise _refusal(path, kind)
    if suffix == ".pdf":
        raise InputError(f"{path} is named .pdf but is not a PDF file.")
    if suffix == ".docx":
        raise InputError(f"{path} is named .docx but is not a Word .docx file.")
    if suffix in HTML_SUFFIXES or _looks_like_html(head):
        return HTML
    return TEXT


def _kind_of_suffix(suffix: str) -> str | None:
    for what, suffixes in _UNSUPPORTED.items():
        if suffix in suffixes.split():
            return what
    return None


def _looks_like_html(head: bytes) -> bool:
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return start.startswith((b"<!doctype html", b"<html"))


def _refusal(path: Path, what: str) -> InputError:
    return InputError(f"{path} is {what}; Swapless reads {SUPPORTED}.")
