"""A full disk during a prefix-cache write loses only that disk copy, never the disk.

MLX raises RuntimeError when a write runs out of space and leaves the partial file
behind; left there, it would hold the space every later command needs. Tested on a
real 8 MiB tmpfs (as root) and with an injected failure.
"""

from __future__ import annotations

import errno
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.engine.cache import prefix_cache as prefix_cache_module
from app.core.engine.cache.prefix_cache import PrefixCache, PrefixCacheSettings
from app.core.engine.engine import Engine
from app.core.files import partial_files
from app.core.presets.generation_settings import KVSettings, SamplingSettings

GREEDY = SamplingSettings(temperature=0.0, max_tokens=2)
KV = KVSettings(bits=8)
ROOT = Path(__file__).resolve().parents[4]


def _system_prompt(tokens_wanted: int, engine: Engine) -> str:
    words, i = [], 0
    while engine.count_tokens(" ".join(words)) < tokens_wanted:
        words.append(f"rule{i} keep answers short and cite section {i}.")
        i += 1
    return " ".join(words)


def _chat(engine: Engine, key: str, system: str):
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Hello?"},
    ]
    return engine.chat(key, messages, KV, GREEDY).wait()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.fixture
def tmpfs(tmp_path):
    """An 8 MiB tmpfs mounted for this test (root only)."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount_point)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _engine(tiny_model_dir, folder: Path, **settings) -> Engine:
    engine = Engine(
        prefix_cache=PrefixCache(PrefixCacheSettings(folder=folder, **settings))
    )
    engine.load(tiny_model_dir)
    return engine


def test_disk_filling_up_during_the_write_loses_only_the_disk_copy(
    tiny_model_dir, tmpfs, monkeypatch
):
    folder = tmpfs / "prefix-cache"
    engine = _engine(tiny_model_dir, folder, min_free_disk_bytes=0)
    try:
        system = _system_prompt(600, engine)
        real_save = prefix_cache_module.save_prompt_cache
        filler = tmpfs / "another-program.bin"

        def save_while_the_disk_fills(path, *args, **kwargs):
            # Another program takes all but 16 KiB after the free-space check passed;
            # the real MLX write then runs out of space half-way.
            free = shutil.disk_usage(tmpfs).free
            with open(filler, "wb") as handle:
                handle.write(b"\0" * (free - 16 * 1024))
            return real_save(path, *args, **kwargs)

        monkeypatch.setattr(
            prefix_cache_module, "save_prompt_cache", save_while_the_disk_fills
        )
        first = _chat(engine, "a", system)
        assert first.reused_tokens == 0
        # No partial file holds the space; the entry lives on in memory.
        assert _leftovers(folder) == []
        assert shutil.disk_usage(tmpfs).free >= 16 * 1024
        second = _chat(engine, "b", system)
        assert second.reuse_source == "memory" and second.reused_tokens > 0
    finally:
        engine.shutdown()


@pytest.mark.parametrize(
    "failure",
    [
        RuntimeError("[write] Unable to write 8388703 bytes to file."),
        OSError(errno.ENOSPC, "No space left on device"),
    ],
    ids=["mlx-runtime-error", "oserror-enospc"],
)
def test_an_injected_enospc_deletes_the_partial_file(
    tiny_model_dir, tmp_path, monkeypatch, failure
):
    folder = tmp_path / "prefix-cache"
    engine = _engine(tiny_model_dir, folder)
    written = []

    def write_half_then_fail(path, *args, **kwargs):
        Path(path).write_bytes(b"\0" * 100_000)  # what MLX leaves behind
        written.append(Path(path).name)
        raise failure

    monkeypatch.setattr(prefix_cache_module, "save_prompt_cache", write_half_then_fail)
    try:
        system = _system_prompt(300, engine)
        _chat(engine, "a", system)
        assert len(written) == 1 and partial_files.MARK in written[0]
        assert _leftovers(folder) == []
        assert _chat(engine, "b", system).reuse_source == "memory"
    finally:
        engine.shutdown()


def test_a_write_that_would_leave_the_disk_nearly_full_is_skipped(
    tiny_model_dir, tmpfs
):
    folder = tmpfs / "prefix-cache"
    # The default keeps 1 GiB free: on an 8 MiB disk nothing is ever written.
    engine = _engine(tiny_model_dir, folder)
    try:
        system = _system_prompt(300, engine)
        _chat(engine, "a", system)
        assert _leftovers(folder) == []
        assert _chat(engine, "b", system).reuse_source == "memory"
    finally:
        engine.shutdown()
    roomy = _engine(tiny_model_dir, folder, min_free_disk_bytes=1024 * 1024)
    try:
        _chat(roomy, "a", system)
        (written,) = folder.iterdir()
        assert written.suffix == ".safetensors"
        assert written.stat().st_mode & 0o777 == 0o600  # holds the prompt's tokens
    finally:
        roomy.shutdown()


def test_any_start_removes_what_a_dead_writer_left(swapless_home, tmp_path):
    """Even `swapless conversations`: no model needs to load first."""
    folder = swapless_home / "prefix-cache"
    folder.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    tag = partial_files._host_tag(socket.gethostname())
    stale = folder / f"abc{partial_files.MARK}{tag}-{dead.pid}-1000.safetensors"
    legacy = folder / "def.safetensors.tmp.safetensors"  # how version 0.1 named it
    live = partial_files.partial_path(folder / "ghi.safetensors")  # this test's own
    kept = folder / "jkl.safetensors"
    for path in (stale, legacy, live, kept):
        path.write_bytes(b"\0" * 4096)
    result = subprocess.run(
        [sys.executable, "-m", "app", "conversations"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert _leftovers(folder) == sorted([live.name, kept.name])
