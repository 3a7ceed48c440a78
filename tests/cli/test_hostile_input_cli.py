"""Hostile input at the command line's edges: one line each, the rest still answered.

Bytes that are not UTF-8 on ``chat``'s stdin or in ``summarize --question`` reached
the tokenizer as lone surrogates (a traceback, and later lines never answered);
``--soak nan`` raised and ``--soak -5`` ran; an empty system prompt failed every turn
("Cannot apply chat template to an empty conversation").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run(args, home, stdin: bytes = b"", timeout: int = 240):
    env = dict(os.environ, SWAPLESS_HOME=str(home))
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        env=env,
    )


@pytest.mark.parametrize("value", ["nan", "-5", "inf", "0", "soon"])
def test_a_bad_soak_duration_is_refused_in_one_line(swapless_home, value):
    result = run(["--soak", value], swapless_home)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("swapless: error: argument --soak")


def test_a_question_that_is_not_utf8_names_the_byte(swapless_home, tmp_path):
    document = tmp_path / "notes.txt"
    document.write_text("Some notes.\n")
    result = run(["summarize", str(document), "--question", b"why\xff?"], swapless_home)
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "byte 0xff at character 3" in lines[0]


def test_a_bad_stdin_line_is_refused_and_the_next_ones_answered_without_a_system_prompt(
    tiny_model_dir, swapless_home
):
    result = run(
        [
            "chat",
            "--model",
            str(tiny_model_dir),
            "--system",
            "",
            "--max-tokens",
            "2",
            "--json",
        ],
        swapless_home,
        stdin=b"hello\n\xc3\x28 broken\nworld\n",
    )
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr
    assert result.returncode == 2  # a line was refused
    answers = [json.loads(line) for line in result.stdout.decode().splitlines()]
    assert [("reply" in a, a.get("refused", False)) for a in answers] == [
        (True, False),
        (False, True),
        (True, False),
    ]
    assert "line 2 of the input is not UTF-8 text (byte 0xc3" in answers[1]["error"]
    errors = [line for line in stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "byte 0xc3 at character 0" in errors[0]
