"""The text of a Word .docx file with python-docx: paragraphs and tables, in order.

Headings and paragraphs become paragraphs of text; a table becomes one line per row
with its cells separated by " | ", so a reading keeps what a person sees in the body.
Headers, footers, comments and tracked deletions are left out. A .docx is a ZIP of
XML that python-docx parses whole, so its text is held at once (the format allows
nothing else cheaply).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from zipfile import BadZipFile

from app.core.errors import InputError


def docx_paragraphs(path: Path) -> Iterator[str]:
    """Yield the body's paragraphs and table rows, each followed by a blank line.

    Raises:
        InputError: Not a readable .docx file.
    """
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(str(path))
    except (PackageNotFoundError, BadZipFile, KeyError, ValueError, OSError) as exc:
        raise InputError(
            f"{path} is not a readable Word .docx file ({exc}). Older .doc files "
            "must be saved as .docx first."
        ) from exc
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                cells = [cell.text.strip() for cell in row.cells]
                line = " | ".join(cell for cell in cells if cell)
                if line:
                    yield line + "\n\n"
        elif block.text.strip():
            yield block.text.strip() + "\n\n"
