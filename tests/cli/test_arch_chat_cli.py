"""`swapless chat` on every buildable architecture: quantized KV, reuse, trims in bound.

The command runs through the real parser and `chat_command.run` in this process (a
subprocess per architecture and precision would take minutes); one real subprocess run
checks that path on a hybrid model. Replies of these random-weight models are noise;
what is checked is what the cache does.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from app.cli.main import build_parser
from app.core.modelkit.arch_configs import ARCHES

LINES = "What is the capital of France?\nAnd of Germany?\nThanks. And Italy?\n"
BOUNDED = {
    "gemma3_text",
    "gemma4_text",
    "gpt_oss",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_next",
    "granitemoehybrid",
    "lfm2",
}


def chat(monkeypatch, capsys, folder, stdin: str, *options: str) -> list[dict]:
    """Run `swapless chat --json` in-process; return one dict per turn."""
    argv = ["chat", "--model", str(folder), "--json", "--temp", "0", *options]
    args = build_parser().parse_args(argv)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    capsys.readouterr()
    status = args.run(args)
    out = capsys.readouterr().out
    assert status == 0, out
    return [json.loads(line) for line in out.splitlines()]


# The CLI's part is the same on every architecture (the engine's per-architecture
# reuse and precision are tests/core/engine/test_architectures.py): `make test` runs one
# model per cache kind — full attention, sliding window, recurrent hybrid — and
# `make test-slow` the rest.
CLI_KINDS = ("llama", "gemma3_text", "qwen3_5")


def by_kind(arches) -> list:
    """``arches`` with those beyond one per cache kind marked slow."""
    return [
        arch if arch in CLI_KINDS else pytest.param(arch, marks=pytest.mark.slow)
        for arch in arches
    ]


@pytest.mark.parametrize("arch", by_kind(ARCHES))
def test_three_turns_at_8_bit_reuse_the_cache_and_hold_less_than_16_bit(
    monkeypatch, capsys, arch_model_dir, arch
):
    folder = arch_model_dir(arch)
    runs = {
        bits: chat(
            monkeypatch,
            capsys,
            folder,
            LINES,
            "--kv-bits",
            str(bits),
            "--max-tokens",
            "6",
        )
        for bits in (8, 16)
    }
    for bits, turns in runs.items():
        assert len(turns) == 3 and not any("error" in t for t in turns)
        assert turns[0]["reused_tokens"] == 0
        assert turns[1]["reused_tokens"] > 0 and turns[2]["reused_tokens"] > 0
        assert turns[1]["new_tokens"] < turns[1]["prompt_tokens"] / 2
        assert all(t["kv_bits"] == bits for t in turns)
    for low, high in zip(runs[8], runs[16], strict=True):
        assert 0 < low["kv_bytes"] < high["kv_bytes"]
    # --json says which layers are at which precision.
    groups = runs[8][-1]["kv_layers"]
    assert {g["kind"] for g in groups} >= {"full_attention"}
    for group in groups:
        assert group["bits"] == (8 if group["kind"] == "full_attention" else 16)
    assert (runs[8][-1]["checkpoint_bytes"] > 0) == (arch in BOUNDED)


def forty_turns(monkeypatch, capsys, folder, turns: int, limit: int) -> list[dict]:
    lines = "".join(
        f"Turn {i}: tell me about item number {i} in the list we discussed, briefly.\n"
        for i in range(1, turns + 1)
    )
    return chat(
        monkeypatch,
        capsys,
        folder,
        lines,
        "--kv-bits",
        "8",
        "--max-tokens",
        "24",
        "--max-context",
        str(limit),
    )


def check_bound(arch: str, rows: list[dict], turns: int, limit: int) -> None:
    assert len(rows) == turns and not any("error" in r for r in rows)
    for row in rows:
        assert row["context_tokens"] <= limit
        assert row["prompt_tokens"] + row["generated_tokens"] <= limit
    trims = [r for r in rows if r["trimmed"]]
    assert trims, "the conversation never reached its limit"
    for row in trims:
        if arch in BOUNDED:
            # Sliding windows and recurrent state cannot be spliced: rebuilt from the
            # nearest state checkpoint, and the note says so.
            assert row["trim_method"] == "rebuild"
            assert "cannot drop tokens from the middle" in row["trim_note"]
        else:
            assert row["trim_method"] == "splice"
    # After a trim the next turn still reuses the rebuilt cache.
    after = [rows[i + 1] for i, r in enumerate(rows[:-1]) if r["trimmed"]]
    assert any(r["reused_tokens"] > 0 for r in after)


@pytest.mark.parametrize("arch", by_kind(["llama", "gemma3_text", "qwen3_5", "lfm2"]))
def test_trims_keep_the_bound(monkeypatch, capsys, arch_model_dir, arch):
    rows = forty_turns(monkeypatch, capsys, arch_model_dir(arch), 12, 320)
    check_bound(arch, rows, 12, 320)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHES)
def test_forty_turns_at_max_context_512_never_pass_512(
    monkeypatch, capsys, arch_model_dir, arch
):
    rows = forty_turns(monkeypatch, capsys, arch_model_dir(arch), 40, 512)
    check_bound(arch, rows, 40, 512)


# The real subprocess is tests/cli/test_chat_cli.py's (llama); the hybrid model's
# turns through the same code are the in-process qwen3_5 case above.
@pytest.mark.slow
def test_the_real_command_on_a_hybrid_model(arch_model_dir, swapless_home):
    env = {**os.environ, "SWAPLESS_HOME": str(swapless_home)}
    argv = [
        sys.executable,
        "-m",
        "app",
        "chat",
        "--model",
        str(arch_model_dir("qwen3_5")),
    ]
    result = subprocess.run(
        [*argv, "--json", "--kv-bits", "8", "--max-tokens", "6", "--temp", "0"],
        input=LINES,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(turns) == 3
    assert turns[1]["reused_tokens"] > 0
    assert [g["bits"] for g in turns[-1]["kv_layers"]] == [16, 8]
