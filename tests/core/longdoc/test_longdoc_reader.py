"""Reading documents: the encodings people save text in, and clear refusals otherwise."""

from __future__ import annotations

import codecs
import hashlib

import pytest

from app.core.errors import InputError
from app.core.longdoc.reading.reader import read_document

TEXT = "Café — naïve résumé.\n\nSecond paragraph: 漢字 and emoji 🙂.\n"


@pytest.mark.parametrize(
    ("raw", "encoding"),
    [
        (TEXT.encode("utf-8"), "utf-8"),
        (codecs.BOM_UTF8 + TEXT.encode("utf-8"), "utf-8-sig"),
        (codecs.BOM_UTF16_LE + TEXT.encode("utf-16-le"), "utf-16"),
        (codecs.BOM_UTF16_BE + TEXT.encode("utf-16-be"), "utf-16"),
        (codecs.BOM_UTF32_LE + TEXT.encode("utf-32-le"), "utf-32"),
    ],
    ids=["utf8", "utf8-bom", "utf16-le", "utf16-be", "utf32-le"],
)
def test_text_encodings_decode_to_the_same_text(tmp_path, raw, encoding):
    path = tmp_path / "doc.md"
    path.write_bytes(raw)
    document = read_document(path)
    assert document.read_text() == TEXT  # the byte-order mark is not part of the text
    assert document.encoding == encoding
    assert document.name == "doc.md"
    assert document.size_bytes == len(raw)
    assert document.sha256 == hashlib.sha256(raw).hexdigest()


def test_windows_and_old_mac_newlines_become_newlines(tmp_path):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\ntwo\r\n\r\nthree\rfour")
    assert read_document(path).read_text() == "one\ntwo\n\nthree\nfour"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"is an image; Swapless reads text"),
        (b"%PDF-1.7\n\xe2\xe3\xcf\xd3\n", r"is not a readable PDF"),
        (b"data\x00\x01\x02", r"binary file \(NUL byte at offset 4\)"),
        ("café".encode("latin-1"), r"not valid UTF-8 text: byte 0xe9 at offset 3"),
        (codecs.BOM_UTF16_LE + b"h\x00\x00\x00i\x00", r"binary file \(it contains NUL"),
        (codecs.BOM_UTF16_LE + b"h\x00i", r"not valid UTF-16 text"),
        (b"", r"is empty"),
        (b" \n\t\n", r"contains no text"),
    ],
    ids=["png", "pdf", "nul", "latin1", "utf16-nul", "utf16-odd", "empty", "blank"],
)
def test_unusable_files_are_refused_naming_the_file(tmp_path, raw, message):
    path = tmp_path / "input.dat"
    path.write_bytes(raw)
    with pytest.raises(InputError, match=message) as caught:
        read_document(path)
    assert str(path) in str(caught.value)


def test_missing_files_and_folders_are_refused(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        read_document(tmp_path / "nope.txt")
    with pytest.raises(InputError, match="is a folder"):
        read_document(tmp_path)


def test_oversized_files_are_refused_before_reading(tmp_path, monkeypatch):
    from app.core.longdoc.reading import reader

    monkeypatch.setattr(reader, "MAX_DOCUMENT_BYTES", 10)
    path = tmp_path / "big.txt"
    path.write_text("x" * 11, encoding="utf-8")
    with pytest.raises(InputError, match="documents up to"):
        read_document(path)
