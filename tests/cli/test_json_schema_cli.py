"""`swapless chat --json-schema FILE`: every reply validates, whatever the weights."""

from __future__ import annotations

import json

import jsonschema

from tests.cli.test_chat_cli import run_cli

SCHEMA = {
    "type": "object",
    "properties": {
        "mood": {"enum": ["calm", "busy"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9},
        "note": {"type": "string", "maxLength": 10},
    },
    "required": ["mood", "count", "note"],
    "additionalProperties": False,
}


def test_every_reply_validates_against_the_schema(
    tiny_model_dir, swapless_home, tmp_path
):
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA), encoding="utf-8")
    result = run_cli(
        [
            "chat",
            "--model",
            str(tiny_model_dir),
            "--json",
            "--json-schema",
            str(schema_file),
            "--max-tokens",
            "80",
            "--temp",
            "1",
            "--seed",
            "4",
        ],
        stdin="Hello there\nAnd again?\n",
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(turns) == 2
    for turn in turns:
        jsonschema.validate(json.loads(turn["reply"]), SCHEMA)


def test_a_bad_schema_file_is_one_line_and_exit_2(swapless_home, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"type": "object", "properties": {"a": {"type": 7}}}')
    result = run_cli(["chat", "--json-schema", str(bad)], env_home=swapless_home)
    assert result.returncode == 2
    assert "not a valid JSON schema" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    missing = run_cli(
        ["chat", "--json-schema", str(tmp_path / "nope.json")], env_home=swapless_home
    )
    assert missing.returncode == 2 and "cannot read" in missing.stderr
