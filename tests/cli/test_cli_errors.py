"""Every bad input is one line on stderr and exit code 2, never a traceback.

Each case runs the real command in a subprocess. A reader that closes the output
early (``| head``) is not an error: the command stops quietly (exit 1, as Python
recommends), and a reply it was streaming is kept as interrupted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.cli.main import main
from app.core.presets.presets import get_preset
from app.core.store import Store

ROOT = Path(__file__).resolve().parents[2]


def swapless(args, home, stdin="", timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=dict(os.environ, SWAPLESS_HOME=str(home)),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, result.stderr
    assert errors[0].startswith("swapless: error: ")
    assert len(errors[0]) < 1100
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


@pytest.fixture
def exported(swapless_home) -> dict:
    """A stored conversation's export, as `swapless export --format json` prints it."""
    with Store.open(swapless_home / "swapless.db") as store:
        conversation_id = store.create_conversation(
            "Stored", preset="chat", settings=get_preset("chat").to_dict()
        )
        store.add_message(conversation_id, "user", "Hello")
        return store.export_json(conversation_id)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["chat", "--seed", "-1"], "a seed must be between 0 and"),
        (["chat", "--seed", "99999999999999999999999"], "a seed must be between"),
        (["chat", "--seed", "seven"], "expected a whole number"),
        (["summarize", "doc.txt", "--seed", "-1"], "a seed must be between"),
        (["chat", "--conversation", "0"], "an id must be a whole number"),
        (["export", "99999999999999999999"], "an id must be a whole number"),
        (["export", "-5"], "an id must be"),
        (["conversations", "--limit", "-1"], "expected 0 or more"),
        (["make-model", "x", "--seed", "-2"], "a seed must be between"),
    ],
)
def test_bad_numbers_are_refused_before_anything_loads(
    args, fragment, capsys, monkeypatch
):
    # In-process (the same `main` the console script runs): argparse refuses these
    # before any import of MLX or the store, so a subprocess would only add start-up.
    monkeypatch.setenv("SWAPLESS_NO_OPENBLAS", "1")  # never re-exec the test runner
    with pytest.raises(SystemExit) as raised:
        main(args)
    result = subprocess.CompletedProcess(
        args, raised.value.code, "", capsys.readouterr().err
    )
    assert_one_line_error(result, fragment)


def test_a_model_type_that_is_no_model_is_one_line(
    swapless_home, tiny_model_dir, tmp_path
):
    folder = tmp_path / "cache-model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "cache"}))
    result = swapless(["chat", "--model", str(folder)], swapless_home, stdin="hi\n")
    assert_one_line_error(result, "architecture 'cache' is not supported")


def test_a_config_with_a_million_layers_is_one_short_line(
    swapless_home, tiny_model_dir, tmp_path
):
    folder = tmp_path / "huge-model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = 1_000_000
    (folder / "config.json").write_text(json.dumps(config))
    result = swapless(["chat", "--model", str(folder)], swapless_home, stdin="hi\n")
    assert_one_line_error(result, "declares 1,000,000 layers", "hold only 2")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (lambda e: {**e, "conversation": [1, 2]}, "conversation must be an object"),
        (lambda e: "[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (lambda e: {**e, "messages": "none"}, "messages must be a list"),
        (lambda e: "{not json", "not valid JSON"),
        (lambda e: b"\xff\xfe{}", "not valid JSON"),
    ],
    ids=["conversation-list", "deeply-nested", "messages-text", "not-json", "binary"],
)
def test_a_bad_import_is_one_line_and_imports_nothing(
    swapless_home, tmp_path, exported, content, fragment
):
    data = content(exported)
    path = tmp_path / "import.json"
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data))
    assert_one_line_error(swapless(["import", str(path)], swapless_home), fragment)
    # Read in place: a second command's start-up would only repeat the first's.
    with Store.open(swapless_home / "swapless.db") as store:
        assert len(store.list_conversations()) == 1


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/dev/zero", "is not a regular file"),
        (None, "is not a regular file"),  # a folder
        ("/nonexistent/export.json", "does not exist"),
    ],
)
def test_an_import_that_is_no_file_is_refused_without_reading_it(
    swapless_home, tmp_path, path, fragment
):
    result = swapless(["import", path or str(tmp_path)], swapless_home, timeout=30)
    assert_one_line_error(result, fragment)


def test_an_import_with_invalid_settings_says_what_it_replaced(
    swapless_home, tmp_path, exported
):
    exported["conversation"]["settings"].update(kv_bits=3, max_context=0, evil=True)
    exported["conversation"]["preset"] = "../../etc/passwd"
    path = tmp_path / "import.json"
    path.write_text(json.dumps(exported))
    result = swapless(["import", str(path)], swapless_home)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "note:" in line]
    assert len(notes) == 4
    for fragment in ("preset name", "'evil'", "kv_bits", "max_context"):
        assert any(fragment in note for note in notes), notes
    new_id = int(result.stdout)
    with Store.open(swapless_home / "swapless.db") as store:
        conversation = store.get_conversation(new_id)
    assert conversation.preset == "chat"
    assert conversation.settings["kv_bits"] == 8
    assert conversation.settings["max_context"] == 10_000


_CLOSE_EARLY = textwrap.dedent(
    """
    import os, subprocess, sys
    reader_gone = subprocess.Popen(
        [sys.executable, "-m", "app", *sys.argv[1:]],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    reader_gone.stdout.read(int(os.environ["READ_BYTES"]))
    reader_gone.stdout.close()  # like `| head -c1`
    err = reader_gone.stderr.read().decode()
    print(reader_gone.wait())
    print(err, end="")
    """
)


def _read_then_close(args, home, read_bytes: int):
    result = subprocess.run(
        [sys.executable, "-c", _CLOSE_EARLY, *args],
        cwd=ROOT,
        env=dict(os.environ, SWAPLESS_HOME=str(home), READ_BYTES=str(read_bytes)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    code, _, stderr = result.stdout.partition("\n")
    return int(code), stderr


@pytest.fixture(scope="module")
def large_store(tmp_path_factory) -> Path:
    """A closed store whose output is far larger than a pipe's buffer, so the write
    really meets the closed end: a 1 MB message and 3,000 conversations.

    Built once per module and copied into each test's home (3,000 conversations,
    each its own transaction, took longer than the command under test).
    """
    path = tmp_path_factory.mktemp("large-store") / "swapless.db"
    with Store.open(path) as store:
        first = store.create_conversation("word " * 20)
        store.add_message(first, "user", "word " * 200_000)
        for i in range(3000):
            store.create_conversation(f"word conversation {i}")
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no WAL left
    return path


@pytest.mark.parametrize(
    ("args", "read_bytes"),
    [
        (["export", "1"], 1),
        (["export", "1", "--format", "json"], 1),
        (["conversations"], 0),
        # 3000 hits: more output than a pipe holds, so the reader really leaves early.
        (["search", "word", "--limit", "3000"], 10),
    ],
)
def test_a_reader_that_leaves_early_ends_the_command_quietly(
    swapless_home, large_store, args, read_bytes
):
    copy = swapless_home / "swapless.db"
    shutil.copyfile(large_store, copy)
    copy.chmod(0o600)  # as Swapless makes it (a looser file is tightened, with a note)
    code, stderr = _read_then_close(args, swapless_home, read_bytes)
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert stderr == ""
    assert code == 0  # `search … | head` succeeded: the reader had what it wanted


def test_a_chat_whose_reader_leaves_keeps_the_reply_as_interrupted(
    swapless_home, tiny_model_dir
):
    script = textwrap.dedent(
        f"""
        import os, subprocess, sys
        chat = subprocess.Popen(
            [sys.executable, "-m", "app", "chat", "--model", {str(tiny_model_dir)!r},
             "--max-tokens", "2000"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        chat.stdin.write(b"Tell me a long story.\\n")
        chat.stdin.close()
        chat.stdout.read(1)
        chat.stdout.close()
        err = chat.stderr.read().decode()
        print(chat.wait())
        print(err, end="")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=dict(os.environ, SWAPLESS_HOME=str(swapless_home)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    code, _, stderr = result.stdout.partition("\n")
    assert "Traceback" not in stderr, stderr
    assert int(code) == 0
    with Store.open(swapless_home / "swapless.db") as store:
        (conversation,) = store.list_conversations()
        reply = store.messages(conversation.id)[-1]
    assert reply.role == "assistant" and reply.state == "interrupted"
    assert reply.error is None


def test_window_model_that_is_not_a_folder_is_one_line(tmp_path):
    # QT_QPA_PLATFORM is set for the tests, so this is the desktop app's path.
    result = swapless(["--model", str(tmp_path / "missing")], tmp_path / "home")
    assert_one_line_error(result, "--model", "no such folder")


def test_window_model_option_is_not_taken_for_a_command():
    from app.cli.main import _command_in, _without_option

    assert _command_in(["--model", "chat"]) is None
    assert _command_in(["--model", "/m", "doctor", "--json"]) == "doctor"
    assert _without_option(["--model", "/m", "-platform", "xcb"], "--model") == [
        "-platform",
        "xcb",
    ]
    assert _without_option(["--model=/m"], "--model") == []
