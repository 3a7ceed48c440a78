"""Read a document the user wants read, or say in words why it cannot be.

A document is fed to the model as text, so its words are taken out of whatever holds
them: text, Markdown and source code as they are; HTML without its markup
(`html_text`); a PDF's text layer (`pdf_text`); a Word .docx's paragraphs and tables
(`docx_text`). An image, an archive, a scanned PDF or a file in a legacy encoding is
refused up front with a message naming the file (`formats`), not turned into mojibake
that costs minutes of prefill. Text encodings accepted: UTF-8 (with or without a
byte-order mark) and UTF-16 or UTF-32 with a byte-order mark, which is how Windows
tools save "Unicode" text. The SHA-256 of the raw bytes identifies the document when
the same file is read again, so an interrupted reading can resume.

Memory stays bounded whatever the file's size where the format allows: `read_document`
checks a text or HTML file in one streaming pass and keeps no text, and
`DocumentText.chunks` streams the decoded text again whenever it is needed (the
segmenter cuts it as a stream too). The text of a PDF or DOCX is kept once extracted
when it is at most `HELD_TEXT_CHARS` (extraction is the slow part), else extracted
again page by page. Only regular files are read: a folder, a FIFO (which would block)
or ``/dev/zero`` (which never ends) is refused before anything is read.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.core.errors import InputError
from app.core.longdoc.reading import formats
from app.core.longdoc.reading.docx_text import docx_paragraphs
from app.core.longdoc.reading.html_text import html_to_text
from app.core.longdoc.reading.pdf_text import no_text_layer_message, pdf_pages

MAX_DOCUMENT_BYTES = 64 * 2**20
"""Largest file read (64 MiB, about 16M tokens of English). Memory no longer depends on
the size; time does: reading that much takes days at a CPU's ~100 tokens/s."""
READ_CHUNK_BYTES = 256 * 1024
"""Bytes read (and decoded) at a time."""
TEXT_CHUNK_CHARS = 256 * 1024
"""Characters handed out at a time for a document held in memory."""
HELD_TEXT_CHARS = 8 * 2**20
"""Extracted PDF or DOCX text kept in memory up to this many characters (a few
thousand pages); longer text is extracted again each time it is read."""
HEAD_BYTES = 512
"""Bytes looked at to tell a file's kind."""

# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)

_FILE_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
}


@dataclass(frozen=True)
class DocumentText:
    """A document and what identifies it.

    Attributes:
        name: The file name shown to the user.
        path: The file's absolute path.
        size_bytes: Size of the file.
        sha256: Hex digest of the file's bytes.
        encoding: The codec it was decoded with (``pdf`` or ``docx`` for those).
        text: The text when it is held in memory: a document built from a string
            (benchmarks) or a PDF/DOCX's extracted text; None for a text or HTML
            file, which keeps no text in memory.
        kind: ``text``, ``html``, ``pdf`` or ``docx`` (`formats.KINDS`).
    """

    name: str
    path: Path
    size_bytes: int
    sha256: str
    encoding: str
    text: str | None = None
    kind: str = formats.TEXT

    def chunks(self) -> Iterator[str]:
        """Yield the text in pieces, newlines normalised to ``\\n``, no byte-order mark.

        Raises:
            InputError: The file can no longer be read, or its content changed since
                `read_document` checked it.
        """
        if self.text is not None:
            for start in range(0, len(self.text), TEXT_CHUNK_CHARS):
                yield self.text[start : start + TEXT_CHUNK_CHARS]
            return
        if self.kind in (formats.PDF, formats.DOCX):
            if _file_digest(self.path) != self.sha256:
                raise self._changed()
            yield from _extracted(self.path, self.kind)
            return
        digest = hashlib.sha256()

        def decoded() -> Iterator[str]:
            for raw, text in _decoded(self.path, self.encoding):
                digest.update(raw)
                yield text

        if self.kind == formats.HTML:
            yield from html_to_text(decoded())
        else:
            yield from decoded()
        if digest.hexdigest() != self.sha256:
            raise self._changed()

    def _changed(self) -> InputError:
        return InputError(
            f"{self.path} changed while it was being read; start the reading again."
        )

    def read_text(self) -> str:
        """Return the whole text at once: only for documents known to be small.

        Raises:
            InputError: As `chunks`.
        """
        return self.text if self.text is not None else "".join(self.chunks())


def read_document(path: str | Path) -> DocumentText:
    """Check a document, reading it once as a stream (PDF and DOCX: extracting it).

    Args:
        path: The file: text, Markdown, source code (UTF-8/UTF-16/UTF-32), HTML, a
            PDF with a text layer, or a Word .docx.

    Returns:
        Its identity; the text itself is streamed by `DocumentText.chunks`.

    Raises:
        InputError: The file is missing, unreadable, not a regular file, too large,
            empty, of a kind Swapless does not read, binary (it contains NUL bytes),
            not valid text in a supported encoding, a PDF without a text layer, or
            without any text; the message names the file.
    """
    path = Path(path).expanduser()
    size = _check_regular_file(path)
    with _open(path) as handle:
        head = handle.read(HEAD_BYTES)
    kind = formats.detect_kind(path, head)
    if kind in (formats.PDF, formats.DOCX):
        return _read_extracted(path, size, kind)
    encoding = _encoding(head)
    digest = hashlib.sha256()
    has_text = False

    def decoded() -> Iterator[str]:
        for raw, text in _decoded(path, encoding):
            digest.update(raw)
            if "\x00" in text:
                raise InputError(
                    f"{path} looks like a binary file (it contains NUL characters), "
                    f"not text. Swapless reads {formats.SUPPORTED}."
                )
            yield text

    texts = html_to_text(decoded()) if kind == formats.HTML else decoded()
    for text in texts:
        has_text = has_text or bool(text.strip())
    if not has_text:
        where = " outside its markup" if kind == formats.HTML else " (only whitespace)"
        raise InputError(f"{path} contains no text{where}.")
    return DocumentText(
        name=path.name,
        path=path.resolve(),
        size_bytes=size,
        sha256=digest.hexdigest(),
        encoding=encoding,
        kind=kind,
    )


def _read_extracted(path: Path, size: int, kind: str) -> DocumentText:
    """Check a PDF or DOCX: its digest, and that it has text; keep short text."""
    digest = _file_digest(path)
    held: list[str] | None = []
    chars, has_text, pages = 0, False, 0
    for piece in _extracted(path, kind):
        pages += 1
        has_text = has_text or bool(piece.strip())
        if held is not None:
            chars += len(piece)
            held = held + [piece] if chars <= HELD_TEXT_CHARS else None
    if not has_text:
        if kind == formats.PDF:
            raise InputError(no_text_layer_message(path, pages))
        raise InputError(f"{path} contains no text.")
    return DocumentText(
        name=path.name,
        path=path.resolve(),
        size_bytes=size,
        sha256=digest,
        encoding=kind,
        text="".join(held) if held is not None else None,
        kind=kind,
    )


def _extracted(path: Path, kind: str) -> Iterator[str]:
    return pdf_pages(path) if kind == formats.PDF else docx_paragraphs(path)


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with _open(path) as handle:
            while chunk := handle.read(READ_CHUNK_BYTES):
                digest.update(chunk)
    except OSError as exc:
        raise InputError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    return digest.hexdigest()


def _check_regular_file(path: Path) -> int:
    """Return the size of ``path`` if it is a regular file that may be read."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(f"{path} does not exist.") from None
    except OSError as exc:
        raise InputError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path} is a folder; give a document file.")
    if not stat.S_ISREG(info.st_mode):
        kind = _FILE_KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise InputError(f"{path} is {kind}, not a regular file; give a document file.")
    if info.st_size > MAX_DOCUMENT_BYTES:
        raise InputError(
            f"{path} is {info.st_size / 2**20:,.0f} MiB; documents up to "
            f"{MAX_DOCUMENT_BYTES // 2**20} MiB can be read."
        )
    if info.st_size == 0:
        raise InputError(f"{path} is empty.")
    return info.st_size


def _open(path: Path):
    """Open ``path`` for reading, refusing it if it turned into a special file.

    ``O_NONBLOCK`` keeps a FIFO swapped in after the check from blocking the open.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(f"{path} does not exist.") from None
    except OSError as exc:
        raise InputError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise InputError(f"{path} is not a regular file; give a document file.")
    return os.fdopen(fd, "rb")


def _encoding(start: bytes) -> str:
    """Return the codec of a file starting with ``start``: its byte-order mark's, else
    UTF-8."""
    for bom, encoding in _BOMS:
        if start.startswith(bom):
            return encoding
    return "utf-8"


def _decoded(path: Path, encoding: str) -> Iterator[tuple[bytes, str]]:
    """Yield (raw bytes, their text) chunk by chunk, with newlines normalised.

    Raises:
        InputError: Undecodable bytes, or (for a file without a byte-order mark) a
            NUL byte, which means binary: UTF-8 text never contains one, and UTF-16
            without a mark cannot be told apart from binary reliably.
    """
    decoder = codecs.getincrementaldecoder(encoding)()
    offset = 0
    carried_cr = False  # a "\r" at a chunk's end may be the first half of "\r\n"
    try:
        with _open(path) as handle:
            while True:
                raw = handle.read(READ_CHUNK_BYTES)
                final = not raw
                if encoding == "utf-8" and (nul := raw.find(b"\x00")) >= 0:
                    raise InputError(
                        f"{path} looks like a binary file (NUL byte at offset "
                        f"{offset + nul}), not text. Swapless reads "
                        f"{formats.SUPPORTED}; text in UTF-8, or UTF-16 with a "
                        "byte-order mark."
                    )
                try:
                    text = decoder.decode(raw, final=final)
                except UnicodeDecodeError as exc:
                    # The decoder prepends bytes it kept from the previous chunk.
                    at = offset - (len(exc.object) - len(raw)) + exc.start
                    raise InputError(
                        f"{path} is not valid {_codec_name(encoding)} text: byte "
                        f"0x{exc.object[exc.start]:02x} at offset {at} cannot be "
                        "decoded. Save it as UTF-8 and try again."
                    ) from exc
                offset += len(raw)
                if carried_cr:
                    text = "\r" + text
                carried_cr = not final and text.endswith("\r")
                if carried_cr:
                    text = text[:-1]
                yield raw, text.replace("\r\n", "\n").replace("\r", "\n")
                if final:
                    return
    except OSError as exc:
        raise InputError(f"{path} cannot be read: {exc.strerror or exc}.") from exc


def _codec_name(encoding: str) -> str:
    return {"utf-8-sig": "UTF-8", "utf-8": "UTF-8"}.get(encoding, encoding.upper())
