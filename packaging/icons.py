"""Render the app icon (``resources/icon.svg``) into the files each platform wants.

Linux desktops want PNGs per size in the hicolor theme (plus the SVG itself); macOS
wants one ``.icns``. Both are generated at build time from the single SVG source, so
the artwork cannot drift from the generated files and nothing binary is committed.

The renderer is Qt's own SVG module (QtSvg ships in PySide6-Essentials, a dependency
of the app), so a clean machine needs no converter. The ICNS writer is pure Python:
an ICNS file is a header and a list of typed chunks, and since macOS 10.7 the chunks
``ic07``…``ic14`` may hold plain PNG data.

Usage::

    python packaging/icons.py [--svg resources/icon.svg] [--out build/icons]
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SVG = REPO / "resources" / "icon.svg"
DEFAULT_OUT = REPO / "build" / "icons"

# hicolor sizes every desktop looks for, plus the large ones for HiDPI docks.
LINUX_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512)
ALL_SIZES = (16, 22, 24, 32, 48, 64, 128, 256, 512, 1024)

# ICNS chunk type -> pixel size of its PNG (Apple's "iconutil" naming in comments).
ICNS_TYPES = {
    "ic11": 32,  # icon_16x16@2x
    "ic12": 64,  # icon_32x32@2x
    "ic07": 128,  # icon_128x128
    "ic13": 256,  # icon_128x128@2x
    "ic08": 256,  # icon_256x256
    "ic14": 512,  # icon_256x256@2x
    "ic09": 512,  # icon_512x512
    "ic10": 1024,  # icon_512x512@2x
}

# Apple's icon grid: the rounded square is 824 px of a 1024 px canvas, centred; the
# margin leaves room for the Dock's shadow. Linux icons use the whole canvas.
MACOS_CONTENT_RATIO = 824 / 1024

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def icns_bytes(chunks: Mapping[str, bytes]) -> bytes:
    """Return an ICNS file holding ``chunks``.

    Args:
        chunks: Chunk type (four ASCII characters, e.g. ``"ic10"``) to its payload,
            for the ``ic07``…``ic14`` types a PNG file's bytes.

    Returns:
        The file's bytes: ``icns``, the total length, then each chunk as type, length
        (header included) and payload, all lengths big-endian.

    Raises:
        ValueError: If a type is not four ASCII characters or a payload is empty.
    """
    body = bytearray()
    for kind, payload in chunks.items():
        if len(kind) != 4 or not kind.isascii():
            raise ValueError(
                f"ICNS chunk type must be 4 ASCII characters, got {kind!r}"
            )
        if not payload:
            raise ValueError(f"ICNS chunk {kind!r} is empty")
        body += kind.encode("ascii") + struct.pack(">I", len(payload) + 8) + payload
    return b"icns" + struct.pack(">I", len(body) + 8) + bytes(body)


def read_icns(data: bytes) -> dict[str, bytes]:
    """Return the chunks of an ICNS file (the inverse of `icns_bytes`).

    Raises:
        ValueError: If ``data`` is not a well-formed ICNS file.
    """
    if data[:4] != b"icns" or struct.unpack(">I", data[4:8])[0] != len(data):
        raise ValueError("not an ICNS file, or its length field is wrong")
    chunks, offset = {}, 8
    while offset < len(data):
        kind = data[offset : offset + 4].decode("ascii")
        (length,) = struct.unpack(">I", data[offset + 4 : offset + 8])
        if length < 8 or offset + length > len(data):
            raise ValueError(f"ICNS chunk {kind!r} at {offset} has a bad length")
        chunks[kind] = data[offset + 8 : offset + length]
        offset += length
    return chunks


def png_size(data: bytes) -> tuple[int, int]:
    """Return (width, height) from a PNG's header.

    Raises:
        ValueError: If ``data`` is not a PNG.
    """
    if data[:8] != PNG_SIGNATURE or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    return struct.unpack(">II", data[16:24])


def _qt_app():
    """Return a Qt GUI application, creating an offscreen one if none exists."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    return QGuiApplication.instance() or QGuiApplication([sys.argv[0]])


def render_png(svg: Path, size: int, content_ratio: float = 1.0) -> bytes:
    """Render ``svg`` into a square PNG of ``size`` pixels with a transparent background.

    Args:
        svg: The SVG file.
        size: Width and height in pixels.
        content_ratio: Share of the canvas the artwork fills, centred (1.0: all of it).

    Returns:
        The PNG file's bytes.

    Raises:
        ValueError: If Qt cannot parse the SVG.
    """
    _qt_app()
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QRectF, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"Qt could not parse {svg}")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    side = size * content_ratio
    offset = (size - side) / 2
    renderer.render(painter, QRectF(offset, offset, side, side))
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def generate(svg: Path, out: Path) -> dict[str, Path]:
    """Write every generated icon file under ``out``.

    Layout::

        out/hicolor/<n>x<n>/apps/swapless.png   Linux, n in LINUX_SIZES
        out/hicolor/scalable/apps/swapless.svg  Linux, the source itself
        out/png/swapless-<n>.png                every size, full canvas
        out/Swapless.icns                       macOS, inset to Apple's grid

    Args:
        svg: The SVG source.
        out: The output folder (created).

    Returns:
        ``{"icns": path, "hicolor": folder, "png": folder}``.
    """
    png_dir = out / "png"
    png_dir.mkdir(parents=True, exist_ok=True)
    for size in ALL_SIZES:
        data = render_png(svg, size)
        (png_dir / f"swapless-{size}.png").write_bytes(data)
        if size in LINUX_SIZES:
            target = out / "hicolor" / f"{size}x{size}" / "apps" / "swapless.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    scalable = out / "hicolor" / "scalable" / "apps" / "swapless.svg"
    scalable.parent.mkdir(parents=True, exist_ok=True)
    scalable.write_bytes(svg.read_bytes())

    macos_pngs = {
        size: render_png(svg, size, MACOS_CONTENT_RATIO)
        for size in sorted(set(ICNS_TYPES.values()))
    }
    icns = out / "Swapless.icns"
    icns.write_bytes(
        icns_bytes({kind: macos_pngs[size] for kind, size in ICNS_TYPES.items()})
    )
    return {"icns": icns, "hicolor": out / "hicolor", "png": png_dir}


def main(argv: list[str] | None = None) -> int:
    """Generate the icons; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--svg", type=Path, default=DEFAULT_SVG)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    written = generate(args.svg, args.out)
    print(f"icons: wrote {written['icns']} and {written['hicolor']}/")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
