"""The native kernel's build states, without MLX: failed builds, the best-effort
setup step, a frozen app's bundled module, and what the budget learns from them."""

from __future__ import annotations

import shutil
import sys

import pytest

from app.core.budget.runtime_profile import runtime_profile
from app.core.engine.cpu import native_build

MODULE = f"{native_build.MODULE_NAME}.cpython-311-x86_64-linux-gnu.so"

pytestmark = pytest.mark.skipif(
    sys.platform == "darwin", reason="the native kernel is built on Linux"
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(native_build.DISABLE_ENV, raising=False)
    return tmp_path / "cache"


@pytest.fixture
def broken_sources(tmp_path, monkeypatch):
    """Sources whose CMake configuration fails: a real failed build, in a second."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed")
    sources = tmp_path / "native"
    sources.mkdir()
    (sources / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(broken LANGUAGES NONE)\n"
        'message(FATAL_ERROR "no compiler for this test")\n'
    )
    monkeypatch.setattr(native_build, "SOURCE_DIR", sources)
    return sources


def test_a_built_module_makes_the_kernel_available_to_the_budget(cache):
    assert not native_build.available()
    assert not runtime_profile().native_kernel
    folder = cache / native_build.build_key()
    folder.mkdir(parents=True)
    (folder / MODULE).touch()
    assert native_build.available()
    assert runtime_profile().native_kernel


def test_switched_off_the_budget_counts_float32(cache, monkeypatch):
    folder = cache / native_build.build_key()
    folder.mkdir(parents=True)
    (folder / MODULE).touch()
    monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    assert not native_build.available()
    assert not runtime_profile().native_kernel


def test_a_failed_build_keeps_its_reason_for_the_doctor(cache, broken_sources):
    result = native_build.build()
    assert result.path is None
    assert "no compiler for this test" in result.reason
    assert native_build.failure_file().parent == cache
    assert native_build.recorded_failure() == result.reason
    state = native_build.state()
    assert state.path is None
    assert state.reason.startswith("not built: build failed")
    assert "no compiler for this test" in state.reason
    assert "`make native` retries" in state.reason


def test_the_best_effort_step_says_one_line_and_never_fails(
    cache, broken_sources, capsys
):
    assert native_build.main(["--best-effort"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("Native quantized kernel: build failed")
    assert len(lines) == 2  # "Building..." and the outcome
    # Not retried by the setup step until the sources or versions change.
    assert native_build.main(["--best-effort"]) == 0
    again = capsys.readouterr().out.splitlines()
    assert len(again) == 1 and "not retried" in again[0]
    # `make native` retries, shows the build's output and fails.
    assert native_build.main([]) == 1


def test_a_changed_source_forgets_the_old_failure(cache, broken_sources):
    native_build.build()
    assert native_build.recorded_failure() is not None
    (broken_sources / "extra.h").write_text("// changed\n")
    assert native_build.recorded_failure() is None
    assert native_build.state().reason == "not built (run `make native`)" or (
        native_build.state().reason.startswith("not built: missing")
    )


def test_missing_tools_are_named(cache, monkeypatch, capsys):
    monkeypatch.setattr(native_build, "missing_tools", lambda: ["cmake"])
    assert native_build.state().reason == "not built: missing cmake"
    assert native_build.main(["--best-effort"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "Native quantized kernel: cannot build: missing cmake"
    assert native_build.recorded_failure() is None  # tried again once installed


def test_a_frozen_app_uses_the_module_it_carries(tmp_path, cache, monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "bundle"), raising=False)
    assert native_build.state().reason == "not bundled with this app"
    assert not native_build.available()
    bundled = tmp_path / "bundle" / native_build.BUNDLE_DIR
    bundled.mkdir(parents=True)
    (bundled / MODULE).touch()
    state = native_build.state()
    assert state.path == bundled / MODULE
    assert state.reason.startswith("bundled with the app")
    assert runtime_profile().native_kernel
    # Nothing to build in a frozen app, even without its sources.
    monkeypatch.setattr(native_build, "SOURCE_DIR", tmp_path / "absent")
    assert native_build.build() == state
