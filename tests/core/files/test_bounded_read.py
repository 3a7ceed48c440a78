"""Every small file Swapless reads goes through one checked, bounded reader.

Each file is replaced by what a hostile or broken machine could put there: a named
pipe (which blocked every command), a link to /dev/zero (which read until memory ran
out), JSON or TOML nested 100,000 deep (RecursionError), numbers with 5,000 digits
and wrongly shaped records (TypeError).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from app.core.budget.model_config import load_config
from app.core.errors import ModelLoadError, SettingsError
from app.core.files import bounded_read, paths
from app.core.longdoc import known_files
from app.core.longdoc.plan.speed import DecodeSample, PrefillSample, SpeedRecord
from app.core.presets.presets import all_presets, builtin_presets
from app.core.settings import load_settings

DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_TOML = "a = " + "[" * 100_000 + "]" * 100_000 + "\n"


def _finishes(function, *args) -> object:
    """Run ``function`` on a thread; a blocked read fails the test instead of hanging."""
    outcome: list = []

    def call() -> None:
        try:
            outcome.append(function(*args))
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout=60)
    assert not thread.is_alive(), "the read blocked"
    return outcome[0]


def test_a_settings_file_that_is_a_named_pipe_is_refused_without_blocking():
    os.mkfifo(paths.settings_path())
    error = _finishes(load_settings)
    assert isinstance(error, SettingsError)
    assert "is a named pipe, not a file" in str(error)


def test_a_settings_file_linked_to_dev_zero_is_refused():
    paths.settings_path().symlink_to("/dev/zero")
    with pytest.raises(SettingsError, match="a link to /dev/zero.*character device"):
        load_settings()


def test_a_huge_settings_file_is_refused_unread(tmp_path):
    with paths.settings_path().open("wb") as file:
        file.truncate(bounded_read.DEFAULT_MAX_BYTES + 1)  # sparse: costs nothing
    with pytest.raises(SettingsError, match="larger than 4 MiB"):
        load_settings()


def test_deep_toml_settings_are_one_line_not_a_recursion_error():
    paths.settings_path().write_text(DEEP_TOML)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    assert "nests 100000 levels deep" in str(raised.value)
    assert len(str(raised.value).splitlines()) == 1


def test_a_deep_user_preset_is_skipped_and_the_builtins_work():
    (paths.presets_dir() / "deep.toml").write_text(DEEP_TOML)
    assert set(all_presets()) == set(builtin_presets())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (DEEP_JSON, "nests 100000 levels deep"),
        ('{"num_hidden_layers": ' + "9" * 5000 + "}", "not usable JSON"),
        ('{"num_hidden_layers": NaN}', "NaN, which is not JSON"),
        ('{"a": "\xff"}', "not UTF-8 text: byte 0xff at line 1"),
    ],
)
def test_a_bad_model_config_is_one_model_load_error(tmp_path, text, message):
    (tmp_path / "config.json").write_bytes(text.encode("latin-1"))
    with pytest.raises(ModelLoadError, match=message):
        load_config(tmp_path)


def test_a_model_config_that_is_a_named_pipe_does_not_block(tmp_path):
    os.mkfifo(tmp_path / "config.json")
    error = _finishes(load_config, tmp_path)
    assert isinstance(error, ModelLoadError) and "named pipe" in str(error)


@pytest.mark.parametrize(
    "content",
    [
        DEEP_JSON,
        json.dumps({"m|kv8": {"prefill": "not rows", "decode": 5}}),
        json.dumps({"m|kv8": [1, 2]}),
        json.dumps({"m|kv8": {"prefill": [[0, 1, "x"], [0, 100, 1e400]]}}),
        json.dumps([1, 2, 3]),
    ],
    ids=["deep", "wrong-types", "entry-not-object", "bad-rows", "not-object"],
)
def test_a_broken_speed_record_is_ignored_and_rewritten(content):
    paths.speed_record_path().write_text(content.replace("Infinity", "1e999"))
    record = SpeedRecord()
    assert record.model("m|kv8") is None
    record.add(
        "m|kv8",
        [PrefillSample(0, 512, 0.5)],
        [DecodeSample(512, 20.0)],
    )  # raised TypeError on a wrongly shaped file
    saved = json.loads(paths.speed_record_path().read_text())
    assert saved["m|kv8"]["prefill"] == [[0, 512, 0.5]]


@pytest.mark.parametrize("content", [DEEP_JSON, '{"abc": 5}', "\x00\x01"])
def test_a_broken_document_record_costs_only_the_resume_button(content):
    paths.known_files_path().write_text(content)
    assert known_files.known_file("abc") is None
    known_files.remember_file("abc", Path("/docs/a.pdf"))
    assert known_files.known_file("abc") == Path("/docs/a.pdf")


def test_a_document_record_linked_to_dev_zero_is_not_read_forever():
    paths.known_files_path().symlink_to("/dev/zero")
    assert _finishes(known_files.known_file, "abc") is None
