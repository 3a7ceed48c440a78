"""Read a text or Markdown file the user wants read, or say in words why it cannot be.

A document is fed to the model as text, so a PDF, an image or a file in a legacy
encoding must be refused up front with a message naming the file, not turned into
mojibake that costs minutes of prefill. Accepted: UTF-8 (with or without a byte-order
mark) and UTF-16 or UTF-32 with a byte-order mark, which is how Windows tools save
"Unicode" text. The SHA-256 of the raw bytes identifies the document when the same file
is read again, so an interrupted reading can resume.
"""

from __future__ import annotations

import codecs
import hashlib
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import InputError

MAX_DOCUMENT_BYTES = 64 * 2**20
"""Largest file read (64 MiB, about 16M tokens of English): beyond that the document
itself, held in memory several times while it is split, starts to matter."""

# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


@dataclass(frozen=True)
class DocumentText:
    """A document's text and what identifies the file.

    Attributes:
        name: The file name shown to the user.
        path: The file's absolute path.
        text: The decoded text, newlines normalised to ``\\n``, byte-order mark removed.
        size_bytes: Size of the file.
        sha256: Hex digest of the file's bytes.
        encoding: The codec it was decoded with.
    """

    name: str
    path: Path
    text: str
    size_bytes: int
    sha256: str
    encoding: str


def read_document(path: str | Path) -> DocumentText:
    """Read a UTF-8/UTF-16/UTF-32 text file.

    Args:
        path: The file.

    Returns:
        Its text and identity.

    Raises:
        InputError: The file is missing, unreadable, too large, empty, binary (it
            contains NUL bytes) or not valid text in a supported encoding; the message
            names the file.
    """
    path = Path(path).expanduser()
    data = _read_bytes(path)
    encoding = _encoding(path, data)
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path} is not valid {_codec_name(encoding)} text: byte "
            f"0x{data[exc.start]:02x} at offset {exc.start} cannot be decoded. Save "
            "it as UTF-8 and try again."
        ) from exc
    if "\x00" in text:
        raise InputError(
            f"{path} looks like a binary file (it contains NUL characters), not text."
        )
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text.strip():
        raise InputError(f"{path} contains no text (only whitespace).")
    return DocumentText(
        name=path.name,
        path=path.resolve(),
        text=text,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        encoding=encoding,
    )


def _read_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if path.is_dir():
            raise InputError(f"{path} is a folder; give a text file.")
        if size > MAX_DOCUMENT_BYTES:
            raise InputError(
                f"{path} is {size / 2**20:,.0f} MiB; documents up to "
                f"{MAX_DOCUMENT_BYTES // 2**20} MiB can be read."
            )
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise InputError(f"{path} does not exist.") from exc
    except OSError as exc:
        raise InputError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    if not data:
        raise InputError(f"{path} is empty.")
    return data


def _encoding(path: Path, data: bytes) -> str:
    """Return the codec for ``data``: from its byte-order mark, else UTF-8."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return encoding
    # Without a mark, a NUL byte means binary: UTF-8 text never contains one, and
    # UTF-16 without a mark cannot be told apart from binary reliably.
    offset = data.find(b"\x00")
    if offset >= 0:
        raise InputError(
            f"{path} looks like a binary file (NUL byte at offset {offset}), not text. "
            "Give a plain-text or Markdown file (UTF-8, or UTF-16 with a byte-order "
            "mark)."
        )
    return "utf-8"


def _codec_name(encoding: str) -> str:
    return {"utf-8-sig": "UTF-8", "utf-8": "UTF-8"}.get(encoding, encoding.upper())
