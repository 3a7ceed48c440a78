"""`swapless summarize` as a user runs it: a real subprocess, a real model, a real kill.

Until ``app/cli/main.py`` registers the command, the subprocess runs a small wrapper
that registers it on a parser and maps `KnownError` to exit code 2, as ``main`` does.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys

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
    assert result.stdout.strip()  # the (noise) answer
    assert "segment" not in result.stdout


def test_a_binary_file_is_one_line_and_exit_code_2(tmp_path):
    path = tmp_path / "photo.png"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    result = run_cli(path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"swapless: error: {path} looks like a binary file (NUL byte at offset 8), "
        "not text. Give a plain-text or Markdown file (UTF-8, or UTF-16 with a "
        "byte-order mark)."
    ]
