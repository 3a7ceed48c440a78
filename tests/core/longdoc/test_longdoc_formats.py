"""Documents people have: PDF, DOCX and HTML read to their text; other kinds refused."""

from __future__ import annotations

import hashlib

import pytest

from app.core.errors import InputError
from app.core.longdoc.reading.reader import read_document
from tests.core.longdoc.pdf_by_hand import make_pdf


def test_a_pdf_text_layer_is_read_page_by_page(tmp_path):
    path = tmp_path / "report.pdf"
    raw = make_pdf(
        [
            ["Harbour report (2025)", "The lantern costs 12 crowns."],
            ["Second page: the river floods in spring."],
        ]
    )
    path.write_bytes(raw)
    document = read_document(path)
    assert document.kind == "pdf" and document.sha256 == hashlib.sha256(raw).hexdigest()
    text = document.read_text()
    assert "Harbour report (2025)" in text and "12 crowns" in text
    assert text.index("lantern") < text.index("Second page")
    assert "\n\n" in text  # pages are separated like paragraphs
    assert "".join(document.chunks()) == text


def test_a_scanned_pdf_without_a_text_layer_is_refused_in_words(tmp_path):
    path = tmp_path / "scan.pdf"
    path.write_bytes(make_pdf([[], []]))
    with pytest.raises(InputError) as caught:
        read_document(path)
    message = str(caught.value)
    assert message.startswith(f"{path} has no text layer (2 pages, no text on any)")
    assert "scanned PDF" in message and "OCR" in message


def test_a_docx_gives_its_paragraphs_and_tables_in_order(tmp_path):
    import docx

    made = docx.Document()
    made.add_heading("Inventory", level=1)
    made.add_paragraph("Lanterns are kept in the harbour store.")
    table = made.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Item", "Cost"
    table.cell(1, 0).text, table.cell(1, 1).text = "Lantern", "12 crowns"
    made.add_paragraph("The end.")
    path = tmp_path / "inventory.docx"
    made.save(path)
    document = read_document(path)
    assert document.kind == "docx"
    assert document.read_text() == (
        "Inventory\n\nLanterns are kept in the harbour store.\n\nItem | Cost\n\n"
        "Lantern | 12 crowns\n\nThe end.\n\n"
    )


def test_html_keeps_the_words_and_drops_markup_scripts_and_styles(tmp_path):
    path = tmp_path / "page.html"
    path.write_text(
        "<!doctype html><html><head><title>Rivers</title><style>p{color:red}</style>"
        "<script>var x = 'hidden';</script></head><body><h1>Rivers &amp; lakes</h1>"
        "<p>The   river\nfloods.</p><ul><li>one</li><li>two</li></ul>"
        "<table><tr><td>a</td><td>b</td></tr></table><pre>  kept\n  as is</pre>"
        "</body></html>",
        encoding="utf-8",
    )
    document = read_document(path)
    assert document.kind == "html"
    text = document.read_text()
    assert "hidden" not in text and "color" not in text and "<" not in text
    assert text.startswith("Rivers\n\nRivers & lakes\n\nThe river floods.")
    assert "- one\n\n- two" in text and "a | b" in text
    assert "  kept\n  as is" in text


def test_html_is_read_as_a_stream_of_pieces(tmp_path, monkeypatch):
    from app.core.longdoc.reading import reader

    monkeypatch.setattr(reader, "READ_CHUNK_BYTES", 7)  # tags cut across pieces
    path = tmp_path / "page.htm"
    path.write_text("<p>alpha <b>beta</b></p><p>gamma &lt;delta&gt;</p>", "utf-8")
    assert read_document(path).read_text().strip() == "alpha beta\n\ngamma <delta>"


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        ("photo.jpg", b"\xff\xd8\xff\xe0rest", "is an image; Swapless reads text"),
        ("song.mp3", b"ID3 tags", "is audio or video"),
        ("sheet.xlsx", b"PK\x03\x04rest", "is a spreadsheet"),
        ("bundle.zip", b"PK\x03\x04rest", "is an archive"),
        (
            "letter.doc",
            b"\xd0\xcf\x11\xe0",
            "is an old Word .doc file: save it as .docx",
        ),
        ("fake.pdf", b"just text", "is named .pdf but is not a PDF file"),
        ("fake.docx", b"just text", "is named .docx but is not a Word .docx file"),
        ("broken.docx", b"PK\x03\x04broken", "is not a readable Word .docx file"),
        (
            "blank.html",
            b"<html><script>x</script></html>",
            "no text outside its markup",
        ),
    ],
)
def test_other_kinds_are_refused_naming_the_file_and_what_to_do(
    tmp_path, name, raw, said
):
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(InputError, match=said) as caught:
        read_document(path)
    assert str(caught.value).startswith(str(path))


def test_source_code_is_text(tmp_path):
    path = tmp_path / "tool.rs"
    path.write_text('fn main() {\n    println!("hi");\n}\n', encoding="utf-8")
    assert read_document(path).kind == "text"
