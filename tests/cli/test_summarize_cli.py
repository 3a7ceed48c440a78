"""`swapless summarize` as a user runs it: a real subprocess, a real model, a real kill.

Until ``app/cli/main.py`` registers the command, the subprocess runs a small wrapper
that registers it on a parser and maps `KnownError` to exit code 2, as ``main`` does.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import random
import re
import signal
import struct
import subprocess
import sys
import termios

import pytest

from app.core.store import Store

WRAPPER = """
import argparse, sys
from app.cli import summarize_command
from app.core.errors import KnownError
parser = argparse.ArgumentParser(prog="swapless")
summarize_command.register(parser.add_subparsers(dest="command"))
args = parser.parse_args(sys.argv[1:])
try:
    sys.exit(args.run(args))
except KnownError as exc:
    print(f"swapless: error: {exc}", file=sys.stderr)
    sys.exit(2)
"""
SEGMENT_KEYS = {
    "segment",
    "segments",
    "kv_bytes",
    "peak_memory_bytes",
    "notes_tokens",
    "tokens_per_s",
    "seconds",
}
FINAL_KEYS = {
    "answer",
    "mode",
    "mode_reason",
    "document_tokens",
    "segments",
    "resumed_from",
    "conversation_id",
    "document_id",
}
WORDS = [
    "river",
    "mountain",
    "castle",
    "engine",
    "memory",
    "budget",
    "token",
    "valley",
    "harbour",
    "lantern",
]


def command(*args):
    return [sys.executable, "-c", WRAPPER, "summarize", *map(str, args)]


def run_cli(*args, timeout=120):
    return subprocess.run(
        command(*args), capture_output=True, text=True, timeout=timeout, env=os.environ
    )


@pytest.fixture(scope="module")
def count_tokens(tiny_model_dir):
    from tokenizers import Tokenizer

    # The same tokenizer.json the engine loads (llama keeps it as written).
    tokenizer = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def write_document(path, count_tokens, paragraphs, seed=0):
    """Paragraphs of 190-250 tokens: one per 256-token segment."""
    rng = random.Random(seed)
    written = []
    while len(written) < paragraphs:
        sentences = []
        while count_tokens(" ".join(sentences)) < 190:
            words = [rng.choice(WORDS) for _ in range(rng.randint(6, 14))]
            sentences.append(" ".join(words).capitalize() + ".")
        if count_tokens(" ".join(sentences)) <= 250:
            written.append(" ".join(sentences))
    path.write_text("\n\n".join(written), encoding="utf-8")
    return path


def test_killed_after_segment_three_the_same_command_resumes(
    tiny_model_dir, tmp_path, count_tokens
):
    document = write_document(tmp_path / "report.txt", count_tokens, paragraphs=20)
    args = command(
        document,
        "--model",
        tiny_model_dir,
        "--mode",
        "segments",
        "--segment-tokens",
        256,
        "--notes-tokens",
        16,
        "--max-tokens",
        8,
        "--seed",
        0,
        "--json",
    )
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as process:
        try:
            before_kill = [json.loads(process.stdout.readline()) for _ in range(3)]
        finally:
            process.kill()  # SIGKILL: nothing in the process gets to clean up
    assert [line["segment"] for line in before_kill] == [1, 2, 3]
    assert all(line.keys() >= SEGMENT_KEYS for line in before_kill)
    assert before_kill[0]["segments"] == 20

    with Store.open() as store:  # opening marks the killed reading interrupted
        [conversation] = store.list_conversations()
        [stored] = store.documents(conversation.id)
        assert stored.status == "interrupted"
        # Killed right after printing segment 3: at most the next one also finished.
        saved = len(store.document_segments(stored.id))
        assert saved in (3, 4)

    result = run_cli(*args[4:])
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    *segments, final = lines
    assert [line["segment"] for line in segments] == list(range(saved + 1, 21))
    assert final.keys() >= FINAL_KEYS
    assert final["resumed_from"] == saved
    assert final["mode"] == "segments" and final["segments"] == 20
    assert (final["conversation_id"], final["document_id"]) == (
        conversation.id,
        stored.id,
    )
    assert f"Resuming at segment {saved + 1} of 20" in result.stderr
    with Store.open() as store:
        assert store.get_document(stored.id).status == "complete"
        assert len(store.document_segments(stored.id)) == 20
        assert [m.role for m in store.messages(conversation.id)] == [
            "user",
            "assistant",
        ]


def test_ctrl_c_stops_between_tokens_and_exits_130(
    tiny_model_dir, tmp_path, count_tokens
):
    document = write_document(tmp_path / "essay.txt", count_tokens, paragraphs=8)
    args = command(
        document,
        "--model",
        tiny_model_dir,
        "--mode",
        "segments",
        "--segment-tokens",
        256,
        "--notes-tokens",
        16,
        "--json",
    )
    with subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        first = json.loads(process.stdout.readline())
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert first["segment"] == 1
    assert process.returncode == 130
    final = json.loads(out.splitlines()[-1])
    assert final["cancelled"] is True and final["answer"] == ""
    assert 1 <= final["next_segment"] < 8
    assert "run the same command again to resume" in err
    with Store.open() as store:
        document_id = final["document_id"]
        assert store.get_document(document_id).status == "interrupted"
        saved = store.document_segments(document_id)
        assert len(saved) == final["next_segment"]


def test_progress_goes_to_stderr_and_the_answer_to_stdout(
    tiny_model_dir, tmp_path, count_tokens
):
    document = write_document(tmp_path / "notes.md", count_tokens, paragraphs=3)
    result = run_cli(
        document,
        "--model",
        tiny_model_dir,
        "--mode",
        "segments",
        "--segment-tokens",
        256,
        "--notes-tokens",
        16,
        "--max-tokens",
        8,
        "--question",
        "Which rivers are named?",
    )
    assert result.returncode == 0, result.stderr
    progress = re.findall(
        r"^segment (\d)/3: \d+ tokens, [\d.]+ tok/s, [\d.]+ s, KV [\d.]+ MiB, "
        r"peak [\d.]+ MiB, notes \d+ tokens$",
        result.stderr,
        flags=re.MULTILINE,
    )
    assert progress == ["1", "2", "3"]
    assert "Segments (as asked): reading it in 3 segment(s)" in result.stderr
    assert re.search(
        r"^Plan: 3 segments of ~\d+ tokens · KV peak [\d.]+ MiB \(4-bit\) · about "
        r"\d+ (s|min)$",
        result.stderr,
        flags=re.MULTILINE,
    )
    answer, _, sources = result.stdout.partition("**Sources**")
    assert answer.strip()  # the (noise) answer
    assert sources.startswith(" (segments of the document each point draws on):")
    assert not re.search(r"^segment \d", result.stdout, flags=re.MULTILINE)
    # Not a terminal: no progress bar.
    assert "tokens/s" not in result.stderr and "left" not in result.stderr


def test_a_terminal_gets_a_progress_bar_and_json_carries_the_notes(
    tiny_model_dir, tmp_path, count_tokens
):
    document = write_document(tmp_path / "notes.md", count_tokens, paragraphs=3)
    primary, secondary = pty.openpty()  # stderr is a terminal, stdout a pipe
    # 30 rows of 160 columns, as a terminal window has (a new pty has none).
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 160, 0, 0))
    try:
        process = subprocess.run(
            command(
                document,
                "--model",
                tiny_model_dir,
                "--mode",
                "segments",
                "--segment-tokens",
                256,
                "--notes-tokens",
                16,
                "--max-tokens",
                8,
                "--json",
            ),
            stdout=subprocess.PIPE,
            stderr=secondary,
            text=True,
            timeout=120,
        )
        os.close(secondary)
        secondary = None
        screen = b""
        while True:
            try:
                data = os.read(primary, 65536)
            except OSError:  # the terminal's other side closed
                break
            if not data:
                break
            screen += data
    finally:
        os.close(primary)
        if secondary is not None:
            os.close(secondary)
    assert process.returncode == 0
    screen = screen.decode("utf-8", "replace")
    # tqdm's bar: percentage, tokens read of the document, where, speed, time left.
    assert re.search(r"\d+%\|.*\| \d+/\d+ tokens · segment [123]/3", screen), screen
    assert re.search(r"tok/s · \d+ s left", screen)
    assert "segment 3/3: " in screen  # the finished-segment lines above the bar
    *segments, final = [json.loads(line) for line in process.stdout.splitlines()]
    assert [s["segment"] for s in segments] == [1, 2, 3]
    assert all(isinstance(s["notes"], str) for s in segments)
    assert {"point", "segments"} <= set(final["sources"][0])


def test_a_docx_is_read_like_a_text_file(tiny_model_dir, tmp_path):
    import docx

    made = docx.Document()
    made.add_heading("Harbour report", level=1)
    for index in range(6):
        made.add_paragraph(f"The lantern number {index} stands by the harbour wall.")
    table = made.add_table(rows=2, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Item", "Cost"
    table.cell(1, 0).text, table.cell(1, 1).text = "Lantern", "12 crowns"
    path = tmp_path / "report.docx"
    made.save(path)
    result = run_cli(path, "--model", tiny_model_dir, "--max-tokens", 8, "--json")
    assert result.returncode == 0, result.stderr
    final = json.loads(result.stdout.splitlines()[-1])
    assert final["mode"] == "whole" and final["document_tokens"] > 40


@pytest.mark.parametrize(
    ("name", "raw", "said"),
    [
        (
            "photo.png",
            b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
            "is an image; Swapless reads text, Markdown, source code, HTML, PDF "
            "(with a text layer) and Word .docx.",
        ),
        (
            "data.dat",
            b"head\x00tail",
            "looks like a binary file (NUL byte at offset 4), not text. Swapless "
            "reads text, Markdown, source code, HTML, PDF (with a text layer) and "
            "Word .docx; text in UTF-8, or UTF-16 with a byte-order mark.",
        ),
        ("old.doc", b"\xd0\xcf\x11\xe0", "is an old Word .doc file: save it as .docx"),
    ],
    ids=["image", "binary", "doc"],
)
def test_an_unreadable_file_is_one_line_and_exit_code_2(tmp_path, name, raw, said):
    path = tmp_path / name
    path.write_bytes(raw)
    result = run_cli(path)
    assert result.returncode == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith(f"swapless: error: {path} {said}")


def test_the_bar_ends_at_100_percent_before_the_answer_and_draws_nothing_after(
    monkeypatch,
):
    import io

    from app.cli.summarize_command import ProgressBar
    from app.core.longdoc import ReadingProgress

    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    bar = ProgressBar(enabled=True)
    bar.update(ReadingProgress("reading", 0, 2, 999, 1000, 50.0, 1.0, 3.0))
    bar.finish()
    drawn = stderr.getvalue()
    assert drawn.rstrip().splitlines()[-1].lstrip("\r").startswith("100%")
    assert "the answer follows" in drawn
    bar.update(ReadingProgress("answering", 2, 2, 1000, 1000, 20.0, 0.5, 4.0))
    assert stderr.getvalue() == drawn  # the streamed answer is not cut by a redraw
