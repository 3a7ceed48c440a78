"""The demo model is built once per home and can be copied into a throw-away home."""

from __future__ import annotations

from app.core.files import paths
from app.core.modelkit import demo_model


def _fake_model(folder):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_complete_model_is_copied_whole(tmp_path):
    source = _fake_model(tmp_path / "a" / "demo")
    target = tmp_path / "b" / "demo"
    assert demo_model.copy_demo_model(source, target)
    assert demo_model.is_complete(target)
    assert (target / "tokenizer.json").read_text() == "{}"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")]


def test_nothing_is_copied_from_an_incomplete_model_or_over_an_existing_one(tmp_path):
    half = tmp_path / "half" / "demo"
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")
    target = tmp_path / "t" / "demo"
    assert not demo_model.copy_demo_model(half, target)
    assert not target.exists()
    existing = _fake_model(tmp_path / "e" / "demo")
    (existing / "model.safetensors").write_bytes(b"mine")
    source = _fake_model(tmp_path / "s" / "demo")
    assert not demo_model.copy_demo_model(source, existing)
    assert (existing / "model.safetensors").read_bytes() == b"mine"


def test_ensure_builds_once_then_reuses(tmp_path):
    folder = demo_model.ensure_demo_model()
    assert folder == paths.demo_model_dir() and demo_model.is_complete(folder)
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert demo_model.ensure_demo_model() == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
