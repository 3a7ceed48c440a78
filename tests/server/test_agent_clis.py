"""Acceptance: Claude Code and Codex, from npm, against `swapless serve` on loopback.

Each CLI runs one non-interactive turn against the greeting model (`greeting_model`:
it answers "Hello from Swapless" and stops, as the CLIs require) and must exit 0 with
that reply printed. Measured on the 2-core test machine (shared): Claude Code 9–13 s (a 2.7K-token
prompt with ``--tools ""``), Codex 100–200 s (its ~18K-token prompt with its tools is
prefilled on the CPU; marked slow, run by `make test-slow`). Skipped, saying why, when a binary is not installed (`.ci/run`
installs both with npm).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.server.greeting_model import GREETING, build_greeting_model

REPO = Path(__file__).resolve().parents[2]


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(
            f"{name} is not installed (npm install -g the package; .ci/run does)"
        )
    return found


@pytest.fixture
def swapless_serve(tiny_model_dir, tmp_path, swapless_home):
    """`swapless serve` of the greeting model on a free port; yields the port."""
    model = build_greeting_model(tiny_model_dir, tmp_path / "greeting")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SWAPLESS_HOME": str(swapless_home)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            "serve",
            "--model",
            str(model),
            "--port",
            "0",
            "--max-context",
            "32768",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    port = None
    deadline = time.monotonic() + 120
    lines = []
    while port is None and time.monotonic() < deadline:
        line = process.stderr.readline()
        lines.append(line)
        if "Serving" in line and "http://127.0.0.1:" in line:
            port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        if not line and process.poll() is not None:
            break
    assert port, "".join(lines)
    # Keep reading its log, so a full pipe never blocks the server.
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    yield port
    process.terminate()
    process.wait(30)
    reader.join(5)
    print("".join(line for line in lines if "request" in line))


def test_claude_code_prints_the_reply(swapless_serve, tmp_path):
    claude = _binary("claude")
    env = {
        **os.environ,
        "HOME": str(tmp_path),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{swapless_serve}",
        "ANTHROPIC_API_KEY": "sk-local",
        "ANTHROPIC_MODEL": "swapless",
        "ANTHROPIC_SMALL_FAST_MODEL": "swapless",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "64",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
        "DISABLE_TELEMETRY": "1",
    }
    started = time.monotonic()
    done = subprocess.run(
        [claude, "-p", "Say hello", "--max-turns", "1", "--tools", ""],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    print(f"claude -p took {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert GREETING.strip() in done.stdout


@pytest.mark.slow  # 2-3 minutes: an ~18K-token prefill on the CPU
def test_codex_exec_prints_the_reply(swapless_serve, tmp_path):
    codex = _binary("codex")
    home = tmp_path / "codex-home"
    home.mkdir()
    (home / "config.toml").write_text(
        'model = "swapless"\nmodel_provider = "swapless"\n\n'
        "[model_providers.swapless]\n"
        'name = "Swapless"\n'
        f'base_url = "http://127.0.0.1:{swapless_serve}/v1"\n'
        'wire_api = "responses"\n'
    )
    started = time.monotonic()
    done = subprocess.run(
        [codex, "exec", "--skip-git-repo-check", "Say hello"],
        env={**os.environ, "CODEX_HOME": str(home)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    print(f"codex exec took {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert GREETING.strip() in done.stdout
