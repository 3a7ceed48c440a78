"""Documents are read as a stream: memory does not grow with the file, odd files refused.

A 50 MB text file once reached 8.2 GB of RSS before its first segment (the whole text
was tokenized at once, several copies held), ``/dev/zero`` was read until MemoryError
and a FIFO hung the reader. Now only regular files are read, in pieces, and the
segmenter never holds more than a window of text.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.core.errors import InputError
from app.core.longdoc.reading.reader import read_document

ROOT = Path(__file__).resolve().parents[3]
WORDS = [
    "the",
    "river",
    "engine",
    "castle",
    "memory",
    "budget",
    "notes",
    "answer",
    "question",
    "model",
]


def _write_document(path: Path, megabytes: int) -> None:
    rng = random.Random(0)
    paragraphs = []
    size = 0
    while size < 2**20:  # one distinct MiB of prose, repeated
        sentences = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 20))).capitalize()
            + "."
            for _ in range(rng.randint(2, 8))
        ]
        paragraphs.append(" ".join(sentences))
        size += len(paragraphs[-1]) + 2
    block = "\n\n".join(paragraphs) + "\n\n"
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(megabytes):
            handle.write(f"Part {i}.\n\n{block}")


_MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    from app.core.longdoc.reading.reader import read_document
    from app.core.longdoc.segmenter import stream_segments

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    before = peak()
    document = read_document(sys.argv[1])
    words = segments = 0
    for segment in stream_segments(document.chunks(), 2048, lambda t: len(t.split())):
        segments += 1
        words += segment.tokens
    print(json.dumps({"before": before, "peak": peak(), "segments": segments,
                      "words": words, "size": document.size_bytes}))
    """
)


def test_a_50_mb_document_is_read_and_segmented_in_bounded_memory(tmp_path):
    path = tmp_path / "big.txt"
    _write_document(path, 50)
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["size"] >= 50 * 2**20
    assert report["words"] == len(path.read_text(encoding="utf-8").split())
    assert report["segments"] >= report["words"] // 2048
    growth = report["peak"] - report["before"]
    # Generous, and still below the file's own size: no copy of it is ever held.
    assert growth < 48 * 2**20, f"peak RSS grew by {growth / 2**20:.0f} MiB"


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    script = (
        "import sys\n"
        "from app.core.longdoc.reading.reader import read_document\n"
        "from app.core.errors import InputError\n"
        "try:\n"
        "    read_document(sys.argv[1])\n"
        "except InputError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(fifo)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,  # a reader that opened the FIFO would wait for a writer forever
    )
    assert "is a named pipe, not a regular file" in result.stdout, result.stderr


@pytest.mark.parametrize(
    ("path", "message"),
    [("/dev/zero", "is a device, not a regular file"), ("/dev/null", "is a device")],
)
def test_devices_are_refused_before_reading(path, message):
    with pytest.raises(InputError, match=message):
        read_document(path)


def test_a_file_changed_after_it_was_checked_is_refused_when_read(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("First version of the text.\n", encoding="utf-8")
    document = read_document(path)
    path.write_text("Other version of the text.\n", encoding="utf-8")
    with pytest.raises(InputError, match="changed while it was being read"):
        list(document.chunks())


def test_newlines_split_across_reads_are_normalised(tmp_path, monkeypatch):
    from app.core.longdoc.reading import reader

    monkeypatch.setattr(reader, "READ_CHUNK_BYTES", 3)  # "\r" and "\n" apart
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"ab\r\ncd\r\r\nef\rgh\r")
    assert read_document(path).read_text() == "ab\ncd\n\nef\ngh\n"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "utf-32"])
def test_characters_split_across_reads_decode_whole(tmp_path, monkeypatch, encoding):
    from app.core.longdoc.reading import reader

    monkeypatch.setattr(reader, "READ_CHUNK_BYTES", 5)  # cuts inside characters
    text = "Café — naïve.\n\n漢字 and emoji 🙂.\n" * 20
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode(encoding))
    document = read_document(path)
    assert document.read_text() == text
    assert len(list(document.chunks())) > 10
