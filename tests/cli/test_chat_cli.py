"""`swapless chat` as a user runs it: a real subprocess, a real model, stdin turns."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def run_cli(args, stdin="", env_home=None, timeout=120):
    env = dict(os.environ)
    if env_home is not None:
        env["SWAPLESS_HOME"] = str(env_home)
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_json_turns_report_reuse_and_kv(tiny_model_dir, swapless_home):
    result = run_cli(
        [
            "chat",
            "--model",
            str(tiny_model_dir),
            "--json",
            "--max-tokens",
            "6",
            "--temp",
            "0",
            "--kv-bits",
            "4",
        ],
        stdin="Hello there\nWhat next?\n",
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(turns) == 2
    required = {
        "reply",
        "prompt_tokens",
        "reused_tokens",
        "new_tokens",
        "generated_tokens",
        "context_tokens",
        "kv_bytes",
        "kv_bits",
        "ttft_s",
        "tokens_per_s",
        "peak_memory_bytes",
    }
    for turn in turns:
        assert required <= turn.keys()
        assert turn["kv_bits"] == 4 and turn["kv_bytes"] > 0
        assert turn["generated_tokens"] == 6
    assert turns[0]["reused_tokens"] == 0
    assert turns[1]["reused_tokens"] > 0
    assert (
        turns[1]["new_tokens"] == turns[1]["prompt_tokens"] - turns[1]["reused_tokens"]
    )
    assert (
        turns[1]["context_tokens"]
        == turns[1]["prompt_tokens"] + turns[1]["generated_tokens"]
    )


def test_demo_model_is_built_on_first_use_and_announced(swapless_home):
    result = run_cli(
        ["chat", "--json", "--max-tokens", "3"], stdin="hi\n", env_home=swapless_home
    )
    assert result.returncode == 0, result.stderr
    assert "random weights" in result.stderr and "--model DIR" in result.stderr
    assert (swapless_home / "models" / "demo" / "config.json").is_file()
    assert json.loads(result.stdout)["generated_tokens"] == 3


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["chat", "--kv-bits", "3"], "invalid choice: 3"),
        (["chat", "--kv-group", "48"], "invalid choice: 48"),
        (["chat", "--model", "/no/such/model"], "/no/such/model does not exist"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(args, needle, swapless_home):
    result = run_cli(args, env_home=swapless_home)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr


def test_trim_settings_from_the_command_line(tiny_model_dir, swapless_home):
    turns = "".join(
        f"Message {i}: the parcel {i} weighs {i} kilos.\n" for i in range(12)
    )
    result = run_cli(
        [
            "chat",
            "--model",
            str(tiny_model_dir),
            "--json",
            "--temp",
            "0",
            "--max-tokens",
            "8",
            "--preset",
            "code",
            "--max-context",
            "300",
            "--keep-ratio",
            "0.5",
            "--trim",
            "rebuild",
        ],
        stdin=turns,
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(reports) == 12
    assert all(
        r["effective_max_context"] == 300 and r["context_tokens"] <= 300
        for r in reports
    )
    trimmed = [r for r in reports if r["trimmed"]]
    assert trimmed
    for report in trimmed:
        assert report["trim_method"] == "rebuild" and report["trim_ms"] > 0
        assert report["summary_tokens"] > 0 and report["summary_method"] == "extractive"


def test_auto_trim_off_refuses_on_stderr_and_exits_2(tiny_model_dir, swapless_home):
    turns = "".join(
        f"Message {i}: some words to fill the context up.\n" for i in range(12)
    )
    result = run_cli(
        [
            "chat",
            "--model",
            str(tiny_model_dir),
            "--json",
            "--max-tokens",
            "8",
            "--max-context",
            "256",
            "--no-auto-trim",
        ],
        stdin=turns,
        env_home=swapless_home,
    )
    assert result.returncode == 2
    assert "Auto-trim is off" in result.stderr and "256" in result.stderr
    refusals = [
        json.loads(line) for line in result.stdout.splitlines() if '"refused"' in line
    ]
    assert refusals and all(r["refused"] for r in refusals)


def test_an_aged_preset_reports_its_tiers_in_json(tiny_model_dir, swapless_home):
    from app.core.presets.presets import get_preset, save_user_preset

    save_user_preset(
        get_preset("chat").with_changes(
            name="aged",
            kv_bits=4,
            kv_recent_tokens=64,
            kv_band_tokens=64,
            kv_band_value_bits=4,
            kv_age_block=64,
        )
    )
    words = " ".join(f"word{i}" for i in range(200))
    result = run_cli(
        ["chat", "--model", str(tiny_model_dir), "--preset", "aged", "--json"]
        + ["--max-tokens", "4", "--temp", "0"],
        stdin=f"Read this: {words}\nAnd now?\n",
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert turns[1]["reused_tokens"] > 0
    for turn in turns:
        tiers = {group["tier"]: group for group in turn["kv_layers"]}
        assert set(tiers) == {"recent", "band", "floor"}
        assert (tiers["band"]["bits"], tiers["band"]["value_bits"]) == (8, 4)
        assert sum(g["tokens"] for g in tiers.values()) == turn["context_tokens"]
        assert sum(g["nbytes"] for g in tiers.values()) == turn["kv_bytes"]
        assert turn["kv_bits"] == 4
