"""The ``peers`` part (llama.cpp side by side) where llama.cpp is absent or misnamed.

The measuring path runs in the bench smoke run (tests/bench/test_parts_smoke.py)
wherever ``make peers`` has built llama-bench; these tests pin what every other
machine gets: one "skipped" row whose reason says how to get llama.cpp, the tool
lookup, and a bad ``--llama-bench`` refused in one line.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from app.bench.parts.peers import chat_turns, llama_build, llama_side
from app.bench.runner import run_bench
from app.bench.settings import SMOKE

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_llama(tmp_path, monkeypatch):
    """No llama.cpp anywhere: an empty peers cache, no variable, nothing on PATH."""
    monkeypatch.setenv(llama_build.CACHE_ENV, str(tmp_path / "peers-cache"))
    monkeypatch.delenv(llama_side.BENCH_ENV, raising=False)
    monkeypatch.delenv(llama_side.PYTHON_ENV, raising=False)
    monkeypatch.setenv("PATH", os.defpath)
    return tmp_path


def test_without_llama_bench_the_part_reports_a_skipped_row_with_how_to_get_it(
    no_llama, tiny_model_dir
):
    out = no_llama / "out"
    results = run_bench(
        out, tiny_model_dir, only="peers", settings=SMOKE, log=lambda _: None
    )
    part = results["parts"]["peers"]
    # Not a skipped part: the run's other verdicts stay complete without llama.cpp.
    assert part["status"] == "ok"
    assert part["figures"]["llama_cpp_found"] is False
    [row] = part["rows"]
    assert row["result"].startswith("skipped: no llama-bench found")
    assert "make peers" in row["result"] and "--llama-bench" in row["result"]
    assert part["ratios"] == {}
    table = (out / "results.md").read_text()
    assert "| llama.cpp side by side | skipped: no llama-bench found" in table


def test_a_named_llama_bench_that_is_not_a_program_is_the_reason(no_llama):
    text = no_llama / "llama-bench"
    text.write_text("not a program")
    tools, reason = llama_side.find_tools(str(text))
    assert tools is None
    assert reason == f"llama-bench {str(text)!r} is not an executable file"


def test_a_llama_bench_without_its_other_tools_says_which_is_missing(
    no_llama, monkeypatch
):
    folder = no_llama / "llama.cpp" / "build" / "bin"
    folder.mkdir(parents=True)
    bench = folder / "llama-bench"
    bench.write_text("#!/bin/sh\n")
    bench.chmod(bench.stat().st_mode | stat.S_IXUSR)
    tools, reason = llama_side.find_tools(str(bench))
    assert tools is None and reason.startswith("no llama-quantize next to")
    quantize = folder / "llama-quantize"
    quantize.write_text("#!/bin/sh\n")
    quantize.chmod(quantize.stat().st_mode | stat.S_IXUSR)
    tools, reason = llama_side.find_tools(str(bench))
    assert tools is None and "convert_hf_to_gguf.py" in reason
    # A llama.cpp checkout: the converter two folders above build/bin is found.
    (no_llama / "llama.cpp" / "convert_hf_to_gguf.py").write_text("")
    tools, reason = llama_side.find_tools(str(bench))
    assert tools is None and "no Python for llama.cpp's converter" in reason
    monkeypatch.setenv(llama_side.PYTHON_ENV, sys.executable)
    tools, reason = llama_side.find_tools(str(bench))
    assert reason == "" and tools is not None
    assert tools.converter == no_llama / "llama.cpp" / "convert_hf_to_gguf.py"
    assert tools.quantize == quantize


def test_a_python_without_llama_cpp_python_is_the_chat_rows_reason(no_llama):
    # The app's own venv never has the binding: the chat is skipped, and how to get it.
    reason = chat_turns.binding_missing(Path(sys.executable))
    assert reason is not None
    assert sys.executable in reason and "make peers" in reason
    binding = llama_build.layout(llama_build.DEFAULT_VERSION)
    real = llama_build.Layout(Path.home() / ".cache/swapless/peers", binding.version)
    if real.venv_python.is_file() and llama_build.python_imports(
        real.venv_python, "llama_cpp"
    ):
        assert chat_turns.binding_missing(real.venv_python) is None


def test_the_build_layout_follows_the_cache_variable(no_llama, monkeypatch):
    monkeypatch.setenv(llama_build.VERSION_ENV, "9.9.9")
    where = llama_build.layout()
    assert where.root == no_llama / "peers-cache"
    assert where.llama_bench == where.root / "build" / "9.9.9" / "bin" / "llama-bench"
    assert where.converter.name == "convert_hf_to_gguf.py"
    assert "vendor" in where.converter.parts


def test_bench_refuses_a_missing_llama_bench_in_one_line(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "bench",
            "--only",
            "peers",
            "--llama-bench",
            str(tmp_path / "absent"),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        env=dict(os.environ, SWAPLESS_HOME=str(tmp_path / "home")),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert (
        result.stderr.strip() == f"swapless bench: no llama-bench at {tmp_path}/absent"
    )
    assert not (tmp_path / "out").exists()


def test_the_llama_bench_path_is_kept_in_the_recorded_command():
    import argparse

    from app.cli import bench_command

    parser = argparse.ArgumentParser()
    bench_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--only", "peers", "--llama-bench", "/x/lb"])
    assert bench_command._command_args(args)[-2:] == ["--llama-bench", "/x/lb"]
