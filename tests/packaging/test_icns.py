"""The pure-Python ICNS writer."""

from __future__ import annotations

import struct

import pytest

PNG = (
    b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", 32, 32)
)


def test_icns_round_trips(icons):
    data = icons.icns_bytes({"ic11": PNG, "ic10": PNG + b"more"})
    assert data[:4] == b"icns"
    assert struct.unpack(">I", data[4:8])[0] == len(data)
    assert icons.read_icns(data) == {"ic11": PNG, "ic10": PNG + b"more"}


def test_icns_chunk_lengths_include_their_header(icons):
    data = icons.icns_bytes({"ic07": b"abc"})
    assert data[8:12] == b"ic07"
    assert struct.unpack(">I", data[12:16])[0] == 8 + 3


@pytest.mark.parametrize("kind", ["ic1", "ic100", "ïc10"])
def test_icns_rejects_bad_types(icons, kind):
    with pytest.raises(ValueError, match="4 ASCII"):
        icons.icns_bytes({kind: PNG})


def test_read_icns_rejects_a_wrong_length(icons):
    data = icons.icns_bytes({"ic07": PNG})
    with pytest.raises(ValueError):
        icons.read_icns(data + b"junk")


def test_png_size(icons):
    assert icons.png_size(PNG) == (32, 32)
    with pytest.raises(ValueError):
        icons.png_size(b"GIF89a")


def test_icns_types_cover_every_retina_size(icons):
    assert sorted(set(icons.ICNS_TYPES.values())) == [32, 64, 128, 256, 512, 1024]
