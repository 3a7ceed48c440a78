"""BLIS's sub-configuration chosen by measurement where its detection says 'generic'."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.blas import blis_arch
from app.cli.blas import preload as blas

ROOT = Path(__file__).resolve().parents[2]
BLIS = next((p for p in blas.BLIS_CANDIDATES if Path(p).is_file()), None)
needs_blis = pytest.mark.skipif(BLIS is None, reason="no system BLIS here")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(blis_arch.ARCH_ENV, raising=False)


@needs_blis
def test_the_choice_is_what_blis_then_runs_and_it_is_cached():
    choice = blis_arch.choose(BLIS)
    assert choice.detected  # BLIS said which kernels it picked by itself
    env = blis_arch.arch_environment(BLIS, {})
    if choice.arch_id is None:
        assert choice.detected != "generic" and env == {}
    else:
        # Only a measured fallback is ever set, and BLIS really runs it.
        assert choice.detected == "generic" and choice.name != "generic"
        assert choice.gflops > choice.detected_gflops
        assert env == {blis_arch.ARCH_ENV: str(choice.arch_id)}
        ran, rate = blis_arch._probe(BLIS, choice.arch_id)
        assert ran == choice.name and rate > 0
    stored = json.loads(blis_arch.cache_file().read_text())
    assert list(stored.values()) == [
        {k: getattr(choice, k) for k in stored[next(iter(stored))]}
    ]


@needs_blis
def test_a_cached_choice_is_not_measured_again(monkeypatch):
    first = blis_arch.choose(BLIS)

    def no_measuring(library):
        raise AssertionError("measured again")

    monkeypatch.setattr(blis_arch, "measure", no_measuring)
    assert blis_arch.choose(BLIS) == first


@needs_blis
def test_a_damaged_cache_is_measured_again_and_rewritten():
    blis_arch.cache_file().parent.mkdir(parents=True)
    blis_arch.cache_file().write_text("{not json")
    choice = blis_arch.choose(BLIS)
    assert json.loads(blis_arch.cache_file().read_text())  # valid again
    assert choice.detected


def test_the_users_own_setting_is_never_replaced(monkeypatch):
    def no_measuring(library):
        raise AssertionError("measured although the user chose")

    monkeypatch.setattr(blis_arch, "measure", no_measuring)
    env = {blis_arch.ARCH_ENV: "3", "OTHER": "x"}
    assert blis_arch.arch_environment("/any/libblas.so.3", env) is env


def test_a_library_that_is_not_blas_is_never_chosen(tmp_path):
    # A file that is no BLAS: every child fails, so nothing is set.
    fake = tmp_path / "libblas.so.3"
    fake.write_bytes(b"not a library")
    assert blis_arch.measure(str(fake)).arch_id is None
    assert blis_arch.arch_environment(str(fake), {}) == {}


def test_the_makefile_entry_prints_nothing_without_blis(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "app/cli/blas/blis_arch.py"),
            str(tmp_path / "none"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0 and done.stdout == "" and done.stderr == ""


@needs_blis
def test_the_makefile_entry_runs_with_the_standard_library_alone(tmp_path):
    # `python3 app/cli/blas/blis_arch.py` runs before any venv exists: no app imports.
    done = subprocess.run(
        [sys.executable, "-I", str(ROOT / "app/cli/blas/blis_arch.py"), str(BLIS)],
        capture_output=True,
        text=True,
        check=False,
        env={"XDG_CACHE_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    choice = blis_arch.choose(str(BLIS))
    expected = "" if choice.arch_id is None else f"{choice.arch_id}\n"
    assert done.stdout == expected


def test_a_frozen_app_never_starts_itself_to_probe(monkeypatch, tmp_path):
    # sys.executable is the app there: a probe would start the app, which would probe.
    monkeypatch.setattr(sys, "frozen", True, raising=False)

    def no_child(*args, **kwargs):
        raise AssertionError("a child process was started")

    monkeypatch.setattr(blis_arch.subprocess, "run", no_child)
    fake = tmp_path / "libblas.so.3"
    fake.write_bytes(b"x")
    assert blis_arch.measure(str(fake)).arch_id is None
    assert blis_arch.arch_environment(str(fake), {}) == {}
