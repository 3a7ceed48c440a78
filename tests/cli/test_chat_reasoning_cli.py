"""`swapless chat` with a reasoning model: --json fields, hidden and dimmed thoughts."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_chat_cli import run_cli

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "templates"


def _r1(thinking_model_dir):
    return thinking_model_dir((TEMPLATES / "deepseek-r1-distill.jinja").read_text())


def test_json_turns_carry_reasoning_apart_from_the_reply(
    thinking_model_dir, swapless_home
):
    args = ["chat", "--model", str(_r1(thinking_model_dir)), "--temp", "0"]
    result = run_cli(
        [*args, "--json", "--max-tokens", "16", "--thinking-budget", "5"],
        stdin="Why is the sky blue?\n",
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    turn = json.loads(result.stdout)
    assert turn["reasoning"] and turn["reasoning_tokens"] > 5
    assert turn["reasoning_s"] >= 0 and turn["reasoning_forced_end"] is True
    assert "</think>" not in turn["reply"] and turn["reasoning"] not in turn["reply"]
    # Hidden: the printed reply is the answer only.
    hidden = run_cli(
        [*args, "--max-tokens", "16", "--thinking-budget", "5", "--hide-reasoning"],
        stdin="Why is the sky blue?\n",
        env_home=swapless_home,
    )
    assert hidden.returncode == 0, hidden.stderr
    assert turn["reasoning"].strip() not in hidden.stdout
    assert "\x1b[2m" not in hidden.stdout  # not a terminal: never dimmed


def test_a_reply_cut_inside_reasoning_is_marked(thinking_model_dir, swapless_home):
    result = run_cli(
        ["chat", "--model", str(_r1(thinking_model_dir)), "--temp", "0"]
        + ["--max-tokens", "4", "--thinking-budget", "0"],
        stdin="Why is the sky blue?\n",
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    assert "still reasoning" in result.stderr
    # --json carries the mark, so a script never takes the empty reply as the answer.
    result = run_cli(
        ["chat", "--model", str(_r1(thinking_model_dir)), "--temp", "0", "--json"]
        + ["--max-tokens", "4", "--thinking-budget", "0"],
        stdin="Why is the sky blue?\n",
        env_home=swapless_home,
    )
    assert result.returncode == 0, result.stderr
    turn = json.loads(result.stdout)
    assert turn["reasoning_truncated"] is True and turn["finish_reason"] == "length"
    assert turn["reply"] == "" and turn["reasoning"]


def test_a_negative_budget_is_refused_in_one_line(thinking_model_dir, swapless_home):
    result = run_cli(
        ["chat", "--model", str(_r1(thinking_model_dir)), "--thinking-budget", "-3"],
        stdin="Hi\n",
        env_home=swapless_home,
    )
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "thinking_budget" in errors[0]
