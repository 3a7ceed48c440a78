"""The prefix cache on the real tiny model: memory, disk, restarts, corruption, caps."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from app.core.engine.cache.prefix_cache import (
    PrefixCache,
    PrefixCacheSettings,
    read_metadata,
)
from app.core.engine.engine import Engine
from app.core.presets.generation_settings import KVSettings, SamplingSettings

GREEDY = SamplingSettings(temperature=0.0, max_tokens=4)
KV = KVSettings(bits=8)


def long_system_prompt(tokens_wanted: int, engine: Engine) -> str:
    words = []
    i = 0
    while engine.count_tokens(" ".join(words)) < tokens_wanted:
        words.append(f"rule{i} keep answers short and cite section {i}.")
        i += 1
    return " ".join(words)


@pytest.fixture
def engine(tiny_model_dir, tmp_path):
    engine = Engine(
        prefix_cache=PrefixCache(PrefixCacheSettings(folder=tmp_path / "prefix"))
    )
    engine.load(tiny_model_dir)
    yield engine
    engine.shutdown()


def chat(engine, key, system, user):
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    handle = engine.chat(key, messages, KV, GREEDY)
    text = handle.text()
    return text, handle.final


def test_second_conversation_reuses_the_system_prompt_from_memory(engine):
    system = long_system_prompt(1024, engine)
    prefix_tokens = len(engine.render([{"role": "system", "content": system}], False))
    assert prefix_tokens >= 1024
    first_text, first = chat(engine, "a", system, "First question?")
    assert first.reused_tokens == 0
    second_text, second = chat(engine, "b", system, "A different question?")
    assert second.reuse_source == "memory"
    assert second.reused_tokens == prefix_tokens
    assert second.new_tokens == second.prompt_tokens - prefix_tokens
    # The reused KV is exact: the same request on a cold engine gives the same reply.
    cold = Engine(
        prefix_cache=PrefixCache(
            PrefixCacheSettings(folder=engine.prefix_cache.folder / "cold")
        )
    )
    cold.load(engine.model_info.folder)
    assert chat(cold, "c", system, "A different question?")[0] == second_text
    cold.shutdown()


def test_after_a_restart_the_prefix_comes_from_disk(engine, tiny_model_dir, tmp_path):
    system = long_system_prompt(1024, engine)
    chat(engine, "a", system, "Hello?")
    files = list(engine.prefix_cache.folder.glob("*.safetensors"))
    assert len(files) == 1
    metadata = read_metadata(files[0])
    assert metadata["model_folder"] == str(tiny_model_dir.resolve())
    script = textwrap.dedent(
        f"""
        import json, sys
        from pathlib import Path
        from app.core.engine.engine import Engine
        from app.core.engine.cache.prefix_cache import PrefixCache, PrefixCacheSettings
        from app.core.presets.generation_settings import KVSettings, SamplingSettings
        engine = Engine(prefix_cache=PrefixCache(PrefixCacheSettings(folder=Path({str(engine.prefix_cache.folder)!r}))))
        engine.load({str(tiny_model_dir)!r})
        messages = [{{"role": "system", "content": sys.stdin.read()}}, {{"role": "user", "content": "Hi"}}]
        final = engine.chat("x", messages, KVSettings(bits=8), SamplingSettings(temperature=0.0, max_tokens=2)).wait()
        print(json.dumps({{"source": final.reuse_source, "reused": final.reused_tokens}}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=system,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["source"] == "disk" and report["reused"] >= 1024


def test_a_corrupt_file_is_deleted_and_the_prefix_recomputed(engine):
    system = long_system_prompt(300, engine)
    _, first = chat(engine, "a", system, "One?")
    (path,) = engine.prefix_cache.folder.glob("*.safetensors")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated, as after a crash mid-write
    engine.prefix_cache.drop_memory()
    _, second = chat(engine, "b", system, "Two?")
    assert second.reused_tokens == 0  # recomputed, not crashed
    # ... and stored again, readable this time.
    (again,) = engine.prefix_cache.folder.glob("*.safetensors")
    assert read_metadata(again) is not None and again.stat().st_size == len(data)


def test_the_disk_cap_holds_after_many_writes(tiny_model_dir, tmp_path):
    probe = Engine(
        prefix_cache=PrefixCache(PrefixCacheSettings(folder=tmp_path / "probe"))
    )
    probe.load(tiny_model_dir)
    chat(probe, "p", long_system_prompt(200, probe), "x")
    (one,) = probe.prefix_cache.folder.glob("*.safetensors")
    cap = int(one.stat().st_size * 3.5)
    probe.shutdown()

    cache = PrefixCache(
        PrefixCacheSettings(folder=tmp_path / "capped", disk_cap_bytes=cap)
    )
    engine = Engine(prefix_cache=cache)
    engine.load(tiny_model_dir)
    for i in range(10):
        chat(engine, f"k{i}", f"Variant {i}. " + long_system_prompt(200, engine), "x")
        assert cache.disk_bytes() <= cap
    assert len(list(cache.folder.glob("*.safetensors"))) == 3
    engine.shutdown()


def test_entries_of_missing_models_are_removed(engine, tmp_path):
    system = long_system_prompt(300, engine)
    chat(engine, "a", system, "One?")
    assert len(list(engine.prefix_cache.folder.glob("*.safetensors"))) == 1
    removed = engine.prefix_cache.scan(model_exists=lambda folder, identity: False)
    assert removed == 1 and not list(engine.prefix_cache.folder.glob("*.safetensors"))


def test_memory_pressure_drops_the_in_memory_entries_first(engine):
    system = long_system_prompt(300, engine)
    chat(engine, "a", system, "One?")
    assert engine.prefix_cache.memory_bytes > 0
    freed = engine.release_memory()
    assert freed > 0 and engine.prefix_cache.memory_bytes == 0
    _, again = chat(engine, "b", system, "Two?")
    assert again.reuse_source == "disk"  # the disk copy survives
