"""Write small, valid PDF files by hand for tests: text pages, or pages with no text.

No binary fixtures: each page is a content stream in Helvetica (one of the 14 standard
fonts every PDF reader knows), with a cross-reference table whose offsets are counted
as the file is written, as the PDF specification (ISO 32000, 7.5) lays out.
"""

from __future__ import annotations


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def make_pdf(pages: list[list[str]]) -> bytes:
    """A PDF with one page per item; each page's lines as text, or none (``[]``).

    A page with no lines has an empty content stream: what a scanned page without
    a text layer gives a text extractor.
    """
    objects: list[bytes] = []
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode())
    font = 3 + 2 * len(pages)
    for index, lines in enumerate(pages):
        content_id = 4 + 2 * index
        objects.append(
            (
                f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                f"/Resources << /Font << /F1 {font} 0 R >> >> "
                f"/Contents {content_id} 0 R >>"
            ).encode()
        )
        if lines:
            body = (
                "BT /F1 11 Tf 14 TL 72 740 Td "
                + " ".join(f"({_escape(line)}) Tj T*" for line in lines)
                + " ET"
            )
        else:
            body = ""
        data = body.encode("latin-1")
        objects.append(
            f"<< /Length {len(data)} >>\nstream\n".encode() + data + b"\nendstream"
        )
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode()
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\n"
        f"startxref\n{xref}\n%%EOF\n"
    ).encode()
    return bytes(out)
