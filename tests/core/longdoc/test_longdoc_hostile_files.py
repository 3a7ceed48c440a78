"""Hostile and encrypted documents: read when a viewer would, one line otherwise.

Built here byte by byte: an AES-encrypted PDF that only has an owner password (every
viewer opens it; pypdf needs ``cryptography`` for AES), a PDF whose page tree claims
200,000 pages, and Word files whose XML is invalid, nested past lxml's limit, holds
a 10 MB text node, or expands from a small zip to hundreds of MiB.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import docx
import pytest
from pypdf import PdfReader, PdfWriter

from app.core.errors import InputError
from app.core.longdoc.reading import docx_text
from app.core.longdoc.reading.reader import read_document
from tests.core.longdoc.pdf_by_hand import make_pdf


def _encrypted_pdf(path: Path, user_password: str) -> None:
    writer = PdfWriter(
        clone_from=PdfReader(io.BytesIO(make_pdf([["Secret harbour."]])))
    )
    writer.encrypt(user_password, owner_password="owner", algorithm="AES-256")
    with path.open("wb") as file:
        writer.write(file)


def test_an_aes_pdf_with_only_an_owner_password_is_read(tmp_path):
    path = tmp_path / "owner-only.pdf"
    _encrypted_pdf(path, "")
    assert "Secret harbour." in read_document(path).read_text()


def test_an_aes_pdf_with_a_user_password_is_one_line(tmp_path):
    path = tmp_path / "locked.pdf"
    _encrypted_pdf(path, "open sesame")
    with pytest.raises(InputError, match="password-protected PDF"):
        read_document(path).read_text()


def test_a_pdf_claiming_200000_pages_is_refused_in_one_line(tmp_path):
    raw = make_pdf([["One real page."]])
    raw = raw.replace(b"/Count 1", b"/Count 200000")
    assert b"/Count 200000" in raw
    path = tmp_path / "huge.pdf"
    path.write_bytes(raw)
    with pytest.raises(InputError) as caught:
        read_document(path).read_text()
    assert "200,000 pages" in str(caught.value)
    assert "\n" not in str(caught.value)


def _docx_with(tmp_path: Path, document_xml: bytes, name: str = "hostile.docx") -> Path:
    """A real .docx (made by python-docx) whose main part is replaced."""
    made = tmp_path / "made.docx"
    docx.Document().save(made)
    path = tmp_path / name
    with (
        zipfile.ZipFile(made) as source,
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "word/document.xml":
                data = document_xml
            target.writestr(item, data, compress_type=zipfile.ZIP_DEFLATED)
    return path


_W = b'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _body(inner: bytes) -> bytes:
    return (
        b'<?xml version="1.0"?><w:document '
        + _W
        + b"><w:body>"
        + inner
        + b"</w:body></w:document>"
    )


@pytest.mark.parametrize(
    ("xml", "words"),
    [
        (b"<w:document <<< not xml", "not a readable Word .docx file"),
        (_body(b"<w:p>" * 300 + b"</w:p>" * 300), "not a readable Word .docx file"),
        (
            b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "aaaaaaaaaa">'
            b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
            b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
            + _body(b"<w:p><w:r><w:t>&c;</w:t></w:r></w:p>"),
            "",
        ),
        (
            _body(b"<w:p><w:r><w:t>" + b"x" * 10_500_000 + b"</w:t></w:r></w:p>"),
            "",
        ),
    ],
    ids=["invalid-xml", "nesting-300", "entity-expansion", "10MB-text-node"],
)
def test_hostile_docx_files_are_one_line_or_read(tmp_path, xml, words):
    path = _docx_with(tmp_path, xml)
    try:
        text = read_document(path).read_text()
    except InputError as exc:
        assert words in str(exc) and "\n" not in str(exc)
    else:
        assert not words, "expected a refusal"
        assert len(text) < 20_000_000  # read as written, never expanded


def test_a_docx_that_expands_past_the_bound_is_refused_before_parsing(
    tmp_path, monkeypatch
):
    # 200,000 tiny paragraphs compress to a few hundred KiB, like the 470 MB file.
    paragraphs = b"<w:p><w:r><w:t>a</w:t></w:r></w:p>" * 200_000
    path = _docx_with(tmp_path, _body(paragraphs))
    assert path.stat().st_size < 1_000_000
    monkeypatch.setattr(docx_text, "MAX_XML_ELEMENTS", 100_000)
    parsed = []
    monkeypatch.setattr(docx, "Document", lambda *a: parsed.append(a))
    with pytest.raises(InputError, match="too large to read safely"):
        read_document(path).read_text()
    assert parsed == []  # refused from the zip's numbers, before any XML parsing


def test_a_docx_declaring_more_than_the_package_bound_is_refused(tmp_path, monkeypatch):
    path = _docx_with(
        tmp_path, _body(b"<w:p><w:r><w:t>" + b"y" * 2_000_000 + b"</w:t></w:r></w:p>")
    )
    monkeypatch.setattr(docx_text, "MAX_PACKAGE_BYTES", 1_000_000)
    with pytest.raises(InputError, match="MiB once uncompressed"):
        read_document(path).read_text()
