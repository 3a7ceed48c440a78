"""Agent session: prompt reuse and time to first token, Swapless vs ``mlx_lm.server``.

A replay of what an agent sends: a long prefix of instructions and tool definitions
(four times the server-reuse size: 4K tokens at full size), then requests of growing
history, a subagent that branches off the same prefix, and the tool list changed at
its end, then the main session once more. Swapless is driven through
``/v1/messages`` (Anthropic, as Claude Code), ``mlx_lm.server`` — started on the same
model folder in a subprocess — through ``/v1/chat/completions`` with the same tools.
For every request: time from sending to the first text piece (TTFT), and the share of
the prompt its server says it reused (``cache_read_input_tokens`` / ``cached_tokens``;
"—" when the server does not say). The two processes share this machine's two cores,
and mlx-lm computes in the weights' dtype where Swapless upcasts on the CPU: the TTFT
columns compare servers as shipped, not equal arithmetic.
"""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
import time

from app.bench.context import BenchContext
from app.bench.results import PartResult, Row, yes_no

NAME = "agent_session"
TITLE = "Agent session: reuse and TTFT vs mlx_lm.server"
HISTORY_REQUESTS = 6
REPLY_TOKENS = 8
TOOLS = [
    {
        "name": f"tool_{i}",
        "description": f"Tool number {i}: does step {i} of the task.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "count": {"type": "integer"}},
            "required": ["path"],
        },
    }
    for i in range(8)
]


def available(ctx: BenchContext) -> str | None:
    """Needs the server's HTTP stack and mlx-lm's server module."""
    try:
        import mlx_lm.server  # noqa: F401
        import starlette  # noqa: F401
    except ImportError as exc:
        return f"a server is not installed ({exc})"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stream(port: int, path: str, body: dict) -> tuple[float, dict, str]:
    """POST a streaming request; return (TTFT s, usage, text)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    started = time.perf_counter()
    connection.request(
        "POST", path, json.dumps(body), {"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    usage: dict = {}
    ttft, texts = 0.0, []
    for raw in response:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        text = ""
        if data.get("type") == "content_block_delta":
            text = data["delta"].get("text", "")
        elif data.get("type") == "message_delta":
            usage = data.get("usage") or {}
        elif data.get("choices"):
            text = data["choices"][0].get("delta", {}).get("content") or ""
        if data.get("usage") and "choices" in data:
            usage = data["usage"]
        if text and not ttft:
            ttft = time.perf_counter() - started
        texts.append(text)
    connection.close()
    return ttft or time.perf_counter() - started, usage, "".join(texts)


def _share(usage: dict) -> float | None:
    if "cache_read_input_tokens" in usage:
        read = usage["cache_read_input_tokens"]
        return read / max(1, read + usage.get("input_tokens", 0))
    details = usage.get("prompt_tokens_details") or {}
    if "cached_tokens" in details and usage.get("prompt_tokens"):
        return details["cached_tokens"] / usage["prompt_tokens"]
    return None


def _session(ctx: BenchContext) -> list[tuple[str, str, list, list]]:
    """(label, system, tools, messages) of every request, in order."""
    system = ctx.filler(ctx.settings.server_reuse_tokens * 4, seed=11)
    history: list[dict] = []
    steps = []
    for i in range(1, HISTORY_REQUESTS + 1):
        history = [*history, {"role": "user", "content": f"Step {i}: do it."}]
        steps.append((f"request {i}", system, TOOLS, history))
        history = [*history, {"role": "assistant", "content": f"Done step {i}."}]
    steps.append(
        ("subagent branch", system, TOOLS, [{"role": "user", "content": "Subtask."}])
    )
    changed = [*TOOLS[:-1], {**TOOLS[-1], "description": "Changed at the end."}]
    tail = [*history, {"role": "user", "content": "Go on."}]
    steps.append(("tool list changed at its end", system, changed, tail))
    steps.append(("main session again", system, TOOLS, tail))
    return steps


def _swapless(ctx: BenchContext, steps) -> list[tuple[float, float | None]]:
    from app.core.presets.presets import get_preset
    from app.server.config import ServerConfig
    from app.server.local_server import LocalServer

    preset = get_preset("chat").with_changes(
        kv_bits=16, temperature=0.0, top_p=1.0, max_context=32768
    )
    server = LocalServer(
        ctx.engine, ServerConfig(preset=preset, port=0), pressure=lambda: "normal"
    )
    server.start()
    out = []
    try:
        for label, system, tools, messages in steps:
            body = {
                "model": "swapless",
                "system": system,
                "tools": tools,
                "messages": messages,
                "max_tokens": REPLY_TOKENS,
                "stream": True,
            }
            ttft, usage, _ = _stream(server.status().port, "/v1/messages", body)
            out.append((ttft, _share(usage)))
            ctx.log(f"  swapless {label}: TTFT {ttft:.2f} s, reused {_share(usage)}")
    finally:
        server.forget_conversations()
        server.stop()
    return out


def _mlx_lm(ctx: BenchContext, steps) -> list[tuple[float, float | None]] | None:
    port = _free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlx_lm.server",
            "--model",
            str(ctx.model_dir),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/v1/models")
                connection.getresponse().read()
                break
            except OSError:
                time.sleep(0.5)
        else:
            return None
        out = []
        for label, system, tools, messages in steps:
            body = {
                "model": str(ctx.model_dir),
                "messages": [{"role": "system", "content": system}, *messages],
                "tools": [
                    {
                        "type": "function",
                        "function": {
                            "name": t["name"],
                            "description": t["description"],
                            "parameters": t["input_schema"],
                        },
                    }
                    for t in tools
                ],
                "max_tokens": REPLY_TOKENS,
                "temperature": 0.0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            ttft, usage, _ = _stream(port, "/v1/chat/completions", body)
            out.append((ttft, _share(usage)))
            ctx.log(
                f"  mlx_lm.server {label}: TTFT {ttft:.2f} s, reused {_share(usage)}"
            )
        return out
    finally:
        process.terminate()
        process.wait(30)


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{share:.0%}"


def run(ctx: BenchContext) -> PartResult:
    """Replay the session on both servers."""
    steps = _session(ctx)
    ours = _swapless(ctx, steps)
    theirs = _mlx_lm(ctx, steps)
    result = PartResult()
    cold = ours[0][0]
    later = [share for _, share in ours[1:HISTORY_REQUESTS]]
    reuse_met = all(s is not None and s >= 0.95 for s in later)
    ttft_ratio = ours[HISTORY_REQUESTS - 1][0] / cold if cold else None
    branch_share = ours[HISTORY_REQUESTS][1]
    result.figures = {
        "steps": [label for label, *_ in steps],
        "swapless": [{"ttft_s": t, "reused": s} for t, s in ours],
        "mlx_lm_server": (
            [{"ttft_s": t, "reused": s} for t, s in theirs] if theirs else None
        ),
    }
    result.ratios["agent_ttft_late_vs_cold"] = ttft_ratio
    result.targets_met["agent_ttft_late_vs_cold"] = (
        ttft_ratio is not None and ttft_ratio <= 0.1
    )
    result.targets_met["agent_reuse_from_request_2"] = reuse_met
    for index, (label, *_rest) in enumerate(steps):
        ttft, share = ours[index]
        other = f"{theirs[index][0]:.2f} s, {_pct(theirs[index][1])}" if theirs else "—"
        result.rows.append(
            Row(
                f"{label}: TTFT and prompt reused, Swapless (mlx_lm.server)",
                f"{ttft:.2f} s, {_pct(share)} ({other})",
            )
        )
    result.rows.append(
        Row(
            f"Prompt reused, requests 2 to {HISTORY_REQUESTS} (Swapless)",
            ", ".join(_pct(s) for s in later),
            target="≥ 95 % each",
            held=yes_no(reuse_met),
        )
    )
    result.rows.append(
        Row(
            f"TTFT request {HISTORY_REQUESTS} ÷ cold request 1 (Swapless)",
            "—" if ttft_ratio is None else f"{ttft_ratio:.3f}",
            target="≤ 0.1",
            held=yes_no(ttft_ratio is not None and ttft_ratio <= 0.1),
        )
    )
    result.notes.append(
        f"The subagent branch reused {_pct(branch_share)} of its prompt (the shared "
        "instructions and tools)."
    )
    result.notes.append(
        "mlx_lm.server gives the tools to the model's chat template; a template "
        "without tool support drops them, so its prompts (and its 'tool list "
        "changed' step) then hold no tools. Swapless writes them into the system "
        "turn until the engine hands them to the template."
    )
    if theirs is None:
        result.notes.append("mlx_lm.server did not start within 5 minutes.")
    return result
