"""`swapless doctor` says in one line whether the native quantized kernel is built (and
why not: a failed build's reason), and how a model's weights will be held."""

from __future__ import annotations

import json
import platform
import sys

import pytest

from app.cli.blas import preload as blas
from app.cli.main import main
from app.core.engine.cpu import native_build

pytestmark = pytest.mark.skipif(
    sys.platform == "darwin" and platform.machine() == "arm64",
    reason="Metal keeps quantized weights without the native kernel",
)


@pytest.fixture(autouse=True)
def _no_reexec(monkeypatch):
    # In-process: main() would otherwise re-execute the interpreter with a fast BLAS.
    monkeypatch.setenv(blas.NO_PRELOAD_ENV, "1")


def _runtime(capsys) -> dict:
    assert main(["doctor", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["runtime"]


def test_without_a_build_doctor_says_how_to_build_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path / "empty"))
    monkeypatch.setattr(native_build, "missing_tools", lambda: [])
    line = _runtime(capsys)["native_kernel"]
    assert line.startswith("not built (run `make native`)")
    assert "dequantized to float32" in line


def test_a_build_for_these_sources_is_found(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path))
    folder = tmp_path / native_build.build_key()
    folder.mkdir()
    (folder / f"{native_build.MODULE_NAME}.cpython-311-x86_64-linux-gnu.so").touch()
    assert str(folder) in _runtime(capsys)["native_kernel"]
    # A build for other sources or versions (another key) is never picked up.
    (folder / f"{native_build.MODULE_NAME}.cpython-311-x86_64-linux-gnu.so").unlink()
    (tmp_path / "0123456789abcdef").mkdir()
    assert _runtime(capsys)["native_kernel"].startswith("not built")


def test_the_decode_block_and_its_switch_are_said(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path))
    folder = tmp_path / native_build.build_key()
    folder.mkdir()
    (folder / f"{native_build.MODULE_NAME}.cpython-311-x86_64-linux-gnu.so").touch()
    line = _runtime(capsys)["native_kernel"]
    assert "Llama/Qwen2-family block runs as two native" in line
    monkeypatch.setenv(native_build.DECODE_BLOCK_ENV, "0")
    line = _runtime(capsys)["native_kernel"]
    assert line.endswith("the decode block is switched off (SWAPLESS_DECODE_BLOCK=0)")


def test_switched_off_is_said(monkeypatch, capsys):
    monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    assert (
        _runtime(capsys)["native_kernel"] == "switched off (SWAPLESS_NATIVE_KERNEL=0)"
    )


def test_a_failed_build_is_explained(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path))
    native_build.failure_file().write_text("build failed (qmm.cpp:1: error: boom)\n")
    line = _runtime(capsys)["native_kernel"]
    assert line.startswith("not built: build failed (qmm.cpp:1: error: boom)")
    assert "`make native` retries" in line


@pytest.fixture(scope="module")
def tiny_4bit(tmp_path_factory):
    from app.core.modelkit.model_builder import build_model

    folder = tmp_path_factory.mktemp("models") / "tiny-4bit"
    return build_model(folder, shape="tiny", bits=4, seed=1)


def _model_report(capsys, folder) -> dict:
    assert main(["doctor", "--json", "--model", str(folder)]) == 0
    return json.loads(capsys.readouterr().out)


def test_the_weights_are_counted_as_the_engine_will_hold_them(
    tiny_4bit, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path))
    dense = _model_report(capsys, tiny_4bit)
    assert dense["runtime"]["weights_layout"]["layout"] == "float32"
    folder = tmp_path / native_build.build_key()
    folder.mkdir()
    (folder / f"{native_build.MODULE_NAME}.cpython-311-x86_64-linux-gnu.so").touch()
    packed = _model_report(capsys, tiny_4bit)
    assert packed["runtime"]["weights_layout"]["layout"] == "packed"
    assert packed["model"]["weights_bytes"] < dense["model"]["weights_bytes"] / 2
    assert main(["doctor", "--model", str(tiny_4bit)]) == 0
    assert "weights: quantized layers stay packed" in capsys.readouterr().out


def test_the_first_start_says_it_once(tmp_path, monkeypatch, capsys):
    from app.cli import main as cli_main

    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(cli_main, "_run_desktop_or_chat", lambda argv, model: 0)
    native_build.failure_file().write_text("build failed (no compiler)\n")
    assert main([]) == 0
    line = capsys.readouterr().err.strip()
    assert line.startswith("swapless: native quantized kernel: not built: build failed")
    assert "\n" not in line
    assert main([]) == 0
    assert capsys.readouterr().err == ""
