"""A model is known by its contents: a byte-identical copy elsewhere is the same model."""

from __future__ import annotations

import os
import shutil

from app.core.models.model_identity import folder_identity


def _copy(source, target):
    """Copy file by file without keeping modification times (as a download would)."""
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copyfile(path, target / path.name)
    return target


def test_a_byte_identical_copy_in_another_folder_has_the_same_identity(
    tiny_model_dir, tmp_path
):
    copy = _copy(tiny_model_dir, tmp_path / "elsewhere" / "copy")
    weights = copy / "model.safetensors"
    os.utime(weights, ns=(1, 1))  # a different modification time changes nothing
    assert folder_identity(copy) == folder_identity(tiny_model_dir) is not None


def test_other_weights_of_the_same_shape_or_another_config_differ(
    tiny_model_dir, tmp_path
):
    original = folder_identity(tiny_model_dir)
    changed = _copy(tiny_model_dir, tmp_path / "changed")
    weights = changed / "model.safetensors"
    data = bytearray(weights.read_bytes())
    middle = len(data) // 2  # a sampled position, inside some tensor's data
    data[middle : middle + 4] = bytes(255 - b for b in data[middle : middle + 4])
    weights.write_bytes(bytes(data))
    assert folder_identity(changed) != original
    config = _copy(tiny_model_dir, tmp_path / "config")
    text = (config / "config.json").read_text(encoding="utf-8")
    (config / "config.json").write_text(text.replace("{", '{"x": 1, ', 1))
    assert folder_identity(config) != original
