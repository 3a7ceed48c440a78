"""The window and the terminal share one home: commands beside a generating chat.

Reproduces the issue: ``printf 'A\\nB\\n' | swapless chat --max-tokens 3000 --json &
swapless conversations`` made the chat fail ("message N is not generating"), because
opening the store marked every generating reply interrupted. Here a chat is frozen
(SIGSTOP) in the middle of streaming a reply, so its writer is alive but silent, while
two more chats and a listing run beside it; then it resumes. Every one must succeed.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from app.core.store import Store

ROOT = Path(__file__).resolve().parents[2]


def _swapless(args, home, stdin=None):
    return subprocess.Popen(
        [sys.executable, "-m", "app", *args],
        cwd=ROOT,
        env=dict(os.environ, SWAPLESS_HOME=str(home)),
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _generating_reply(database: Path) -> tuple[int, int] | None:
    """(id, characters so far) of the reply being streamed, if any."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            return db.execute(
                "SELECT id, length(content) FROM messages WHERE state = 'generating'"
            ).fetchone()
    except sqlite3.OperationalError:
        return None


def _write_lock_is_free(database: Path) -> bool:
    db = sqlite3.connect(database, timeout=0.2, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def _complete_replies(database: Path) -> int:
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
            return db.execute(
                "SELECT count(*) FROM messages WHERE role = 'assistant' "
                "AND state = 'complete'"
            ).fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def _freeze_mid_reply(process, database: Path, timeout=120) -> tuple[int, int]:
    """Ask for a long story and SIGSTOP ``process`` while it streams the reply and
    holds no lock; (the reply's id, how many messages were sent).

    The random model may end a reply on its own before a poll sees it streaming (a
    fast machine writes hundreds of tokens a second): the story is then asked again.
    """
    asked = 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read()
        if _complete_replies(database) == asked:
            process.stdin.write("Tell me a very long story.\n")
            process.stdin.flush()
            asked += 1
        time.sleep(0.05)
        reply = database.exists() and _generating_reply(database)
        if not reply or reply[1] == 0:
            continue
        process.send_signal(signal.SIGSTOP)
        if _write_lock_is_free(database) and _generating_reply(database):
            return reply[0], asked
        process.send_signal(signal.SIGCONT)  # stopped mid-write or just after: again
    raise AssertionError("the chat never streamed a reply")


def test_chats_and_a_listing_beside_a_generating_chat_all_succeed(
    tiny_model_dir, swapless_home, tmp_path
):
    database = swapless_home / "swapless.db"
    model = ["--model", str(tiny_model_dir)]
    frozen = _swapless(
        ["chat", *model, "--max-tokens", "800", "--json"],
        swapless_home,
        stdin=subprocess.PIPE,
    )
    reply_id, asked = _freeze_mid_reply(frozen, database)
    try:
        hello = tmp_path / "hello.txt"
        hello.write_text("Hello beside you.\n")
        with open(hello) as first, open(hello) as second:
            beside = [
                _swapless(
                    ["chat", *model, "--max-tokens", "20", "--json"], swapless_home, f
                )
                for f in (first, second)
            ]
        listing = _swapless(["conversations", "--json"], swapless_home)
        results = [p.communicate(timeout=300) for p in [*beside, listing]]
        for process, (_, err) in zip([*beside, listing], results, strict=True):
            assert process.returncode == 0, err
            assert "marked interrupted" not in err  # nobody's reply was taken
        assert [len(out.splitlines()) for out, _ in results[:2]] == [1, 1]
        listed = json.loads(results[2][0])
        assert "Tell me a very long story." in [c["title"] for c in listed]
        with Store.open(database) as store:
            assert store.recovered_replies == 0
            assert store.get_message(reply_id).state == "generating"
    finally:
        frozen.send_signal(signal.SIGCONT)
    # The frozen chat resumes as if nothing happened and answers one more turn.
    out, err = frozen.communicate("And another one.\n", timeout=600)
    assert frozen.returncode == 0, err
    assert len(out.splitlines()) == asked + 1
    with Store.open(database) as store:
        assert store.get_message(reply_id).state == "complete"
        states = {
            m.state
            for c in store.list_conversations()
            for m in store.messages(c.id)
            if m.role == "assistant"
        }
        assert states == {"complete"}
