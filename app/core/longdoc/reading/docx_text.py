"""The text of a Word .docx file with python-docx: paragraphs and tables, in order.

Headings and paragraphs become paragraphs of text; a table becomes one line per row
with its cells separated by " | ", so a reading keeps what a person sees in the body.
Headers, footers, comments and tracked deletions are left out. A .docx is a ZIP of
XML that python-docx parses whole, so its text is held at once (the format allows
nothing else cheaply) — which is why the package is measured first (`check_package`):
a 0.5 MB file whose XML expands to 470 MB must be refused before anything parses it.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from pathlib import Path
from zipfile import BadZipFile

from app.core.errors import InputError

MAX_PACKAGE_BYTES = 512 * 2**20
"""Uncompressed size of all parts together (pictures included): a real document's
parts come to tens of MiB."""
MAX_XML_PART_BYTES = 64 * 2**20
"""One XML part uncompressed; the main document of a 1,000-page report is ~10 MiB."""
MAX_XML_ELEMENTS = 2_000_000
"""Tags in one XML part, counted before parsing (each costs lxml ~100 bytes+)."""
MAX_PARTS = 10_000


def check_package(path: Path) -> None:
    """Refuse a zip-based document whose parts would expand past the bounds.

    The sizes come from the zip's directory (reading stops at the declared size, so
    a part cannot lie its way past it); the tags of each XML part are counted while
    it is decompressed in pieces, so the check itself holds one piece at a time.

    Raises:
        InputError: Not a zip file, or too many parts, too large, or too many tags.
    """
    try:
        with zipfile.ZipFile(path) as package:
            parts = package.infolist()
            if len(parts) > MAX_PARTS:
                raise InputError(_too_big(path, f"{len(parts):,} parts"))
            total = sum(part.file_size for part in parts)
            if total > MAX_PACKAGE_BYTES:
                raise InputError(
                    _too_big(path, f"{total / 2**20:,.0f} MiB once uncompressed")
                )
            for part in parts:
                if part.filename.endswith((".xml", ".rels")):
                    _check_xml_part(path, package, part)
    except (BadZipFile, OSError, EOFError, RuntimeError, NotImplementedError) as exc:
        raise InputError(f"{path} is not a readable Word .docx file ({exc}).") from exc


def _check_xml_part(
    path: Path, package: zipfile.ZipFile, part: zipfile.ZipInfo
) -> None:
    if part.file_size > MAX_XML_PART_BYTES:
        raise InputError(
            _too_big(path, f"{part.filename} of {part.file_size / 2**20:,.0f} MiB")
        )
    tags = 0
    with package.open(part) as stream:
        while chunk := stream.read(1 << 20):
            tags += chunk.count(b"<")
            if tags > MAX_XML_ELEMENTS:
                raise InputError(
                    _too_big(
                        path, f"over {MAX_XML_ELEMENTS:,} elements in {part.filename}"
                    )
                )


def _too_big(path: Path, what: str) -> str:
    return (
        f"{path} is too large to read safely ({what}); a Word document that size is "
        "not supported. Save its text as a .txt file and read that instead."
    )


def docx_paragraphs(path: Path) -> Iterator[str]:
    """Yield the body's paragraphs and table rows, each followed by a blank line.

    Raises:
        InputError: Not a readable .docx file.
    """
    import docx

    check_package(path)
    try:
        document = docx.Document(str(path))
    except Exception as exc:  # noqa: BLE001 - lxml and python-docx raise many kinds
        raise InputError(
            f"{path} is not a readable Word .docx file ({_reason(exc)}). Older .doc "
            "files must be saved as .docx first."
        ) from exc
    try:
        yield from _blocks(document)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed part found while walking
        raise InputError(
            f"{path} is not a readable Word .docx file ({_reason(exc)})."
        ) from exc


def _reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 200 else text[:199] + "…"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _blocks(document) -> Iterator[str]:
    from docx.table import Table

    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [cell.text.strip() for cell in row.cells]
                line = " | ".join(cell for cell in cells if cell)
                if line:
                    yield line + "\n\n"
        elif block.text.strip():
            yield block.text.strip() + "\n\n"
