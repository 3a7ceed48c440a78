"""`swapless serve` as a user runs it: a real process, a real port, Ctrl+C to stop."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest


def start(args, home):
    env = {**os.environ, "SWAPLESS_HOME": str(home)}
    env.pop("SWAPLESS_API_KEY", None)
    return subprocess.Popen(
        [sys.executable, "-m", "app", "serve", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1"])
def test_a_non_loopback_host_is_refused_without_a_key(swapless_home, host):
    process = start(["--host", host, "--port", "0"], swapless_home)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "without an API key" in lines[0]
    assert lines[0].startswith("swapless: error:")


def test_serve_answers_then_stops_on_ctrl_c(tiny_model_dir, swapless_home):
    process = start(
        ["--model", str(tiny_model_dir), "--port", "0", "--max-context", "2048"],
        swapless_home,
    )
    try:
        banner = process.stderr.readline()
        found = re.search(r"at (http://127\.0\.0\.1:(\d+)/v1)", banner)
        assert found, banner
        assert "limit 2048 tokens" in banner and "auto-trim on" in banner
        base = found.group(1)
        with urllib.request.urlopen(f"{base}/models", timeout=30) as response:
            models = json.load(response)
        assert [m["id"] for m in models["data"]] == [tiny_model_dir.name]
        request = urllib.request.Request(
            f"{base}/chat/completions",
            data=json.dumps(
                {
                    "model": tiny_model_dir.name,
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "hello"}],
                }
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            reply = json.load(response)
        assert reply["usage"]["completion_tokens"] == 5
        log = process.stderr.readline()
        assert "5 generated" in log, log
        process.send_signal(signal.SIGINT)
        _, rest = process.communicate(timeout=30)
        assert process.returncode == 0, rest
        assert rest.strip().endswith("Stopped.")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_key_on_the_command_line_is_refused(swapless_home):
    process = start(["--api-key", "s3cret-key", "--port", "0"], swapless_home)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "--api-key-file" in lines[0], stderr
    assert "s3cret-key" not in stderr


def test_a_key_file_others_can_read_is_refused(swapless_home, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    key_file.chmod(0o644)
    process = start(["--api-key-file", str(key_file), "--port", "0"], swapless_home)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert f"chmod 600 {key_file}" in stderr and "s3cret-key" not in stderr


def test_the_key_file_guards_the_server_and_stays_out_of_the_process_list(
    tiny_model_dir, swapless_home, tmp_path
):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    key_file.chmod(0o600)
    process = start(
        [
            "--model",
            str(tiny_model_dir),
            "--port",
            "0",
            "--api-key-file",
            str(key_file),
        ],
        swapless_home,
    )
    try:
        banner = process.stderr.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", banner)
        assert found and "API key required" in banner, banner
        with open(f"/proc/{process.pid}/cmdline", "rb") as cmdline:
            assert b"s3cret-key" not in cmdline.read()
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{found.group(1)}/models", timeout=30)
        assert refused.value.code == 401
        request = urllib.request.Request(
            f"{found.group(1)}/models", headers={"Authorization": "Bearer s3cret-key"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=30)


_STUCK_TRIM = """
import sys, threading, time
import app.core.chat.trimmer as trimmer

def stuck(self, *args, **kwargs):
    print("TRIM STARTED", file=sys.stderr, flush=True)
    time.sleep(600)  # a trim of a huge history that never checks for a cancel

trimmer.Trimmer.write_summary = stuck
from app.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _post(request) -> None:
    with contextlib.suppress(Exception):  # the server goes away mid-request
        urllib.request.urlopen(request, timeout=300)


def test_sigterm_ends_serve_while_a_trim_is_stuck(tiny_model_dir, swapless_home):
    """SIGTERM printed "Stopped." but the process never exited (a worker still ran)."""
    env = {**os.environ, "SWAPLESS_HOME": str(swapless_home)}
    env["SWAPLESS_NO_OPENBLAS"] = "1"  # keep this process (and its patch) as it is
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _STUCK_TRIM,
            "serve",
            "--model",
            str(tiny_model_dir),
            "--port",
            "0",
            "--max-context",
            "512",
        ],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    lines: queue.Queue[str] = queue.Queue()
    try:
        banner = process.stderr.readline()
        base = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", banner).group(1)
        threading.Thread(
            target=lambda: [lines.put(line) for line in process.stderr], daemon=True
        ).start()
        history = []
        for turn in range(40):
            history.append(
                {"role": "user", "content": f"question {turn} " + "word " * 60}
            )
            history.append({"role": "assistant", "content": "answer " * 60})
        history.append({"role": "user", "content": "and now?"})
        request = urllib.request.Request(
            f"{base}/chat/completions",
            data=json.dumps(
                {"model": tiny_model_dir.name, "max_tokens": 4, "messages": history}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        threading.Thread(target=_post, args=(request,), daemon=True).start()
        while "TRIM STARTED" not in lines.get(timeout=300):
            pass
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)  # it never ended before
        assert process.returncode == 0
        rest = []
        with contextlib.suppress(queue.Empty):
            while True:
                rest.append(lines.get(timeout=5))
        assert "Stopped." in "".join(rest)
        assert "Traceback" not in "".join(rest)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
