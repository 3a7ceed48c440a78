"""The app icon renders from its SVG with Qt, at every size the platforms want."""

from __future__ import annotations

from pathlib import Path

import pytest

SVG = Path(__file__).resolve().parents[2] / "resources" / "icon.svg"


@pytest.fixture
def rendered(qapp, icons):
    from PySide6.QtGui import QImage

    def render(size, ratio=1.0):
        data = icons.render_png(SVG, size, ratio)
        assert icons.png_size(data) == (size, size)
        return QImage.fromData(data, "PNG")

    return render


def test_icon_is_drawn_with_transparent_corners(rendered):
    image = rendered(256)
    assert image.pixelColor(0, 0).alpha() == 0
    assert image.pixelColor(128, 128).alpha() == 255
    assert image.pixelColor(128, 20).alpha() == 255  # the rounded square's top edge


def test_icon_is_legible_at_16_px(rendered):
    image = rendered(16)
    colors = {image.pixelColor(x, y).name() for x in range(16) for y in range(16)}
    assert len(colors) > 10  # not a blank or single-colour square
    # The white bubble survives the downscale.
    assert max(image.pixelColor(x, 7).lightness() for x in range(16)) > 200


def test_macos_variant_is_inset_to_apples_grid(rendered, icons):
    image = rendered(1024, icons.MACOS_CONTENT_RATIO)
    assert image.pixelColor(90, 512).alpha() == 0  # inside Apple's 100 px margin
    assert image.pixelColor(512, 512).alpha() == 255


def test_generate_writes_linux_and_macos_files(qapp, icons, tmp_path):
    written = icons.generate(SVG, tmp_path)
    for size in icons.LINUX_SIZES:
        png = tmp_path / "hicolor" / f"{size}x{size}" / "apps" / "swapless.png"
        assert icons.png_size(png.read_bytes()) == (size, size)
    assert (tmp_path / "hicolor" / "scalable" / "apps" / "swapless.svg").is_file()
    chunks = icons.read_icns(written["icns"].read_bytes())
    assert {kind: icons.png_size(data)[0] for kind, data in chunks.items()} == (
        icons.ICNS_TYPES
    )
