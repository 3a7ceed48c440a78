"""Local server: decode speed through HTTP ÷ the engine directly, and reuse across requests.

Decode: the same chat (system prompt + a long user message, greedy, a fresh cache each
time) is answered by `Engine.chat` consumed on this thread, as the CLI does, and by a
`LocalServer` on a loopback port on the same engine, read as a streaming client reads
it (stdlib `http.client`, so no client library's cost is counted). Both are timed where
a piece of text reaches the consumer; decode speed is (tokens − 1) ÷ (time of the last
piece − time of the first). Pairs run A B, B A, … and the ratio is the median over pairs;
the client, the HTTP loop, the request's worker and the engine share this process's
two cores, so it is the pessimistic case of a client in another process. The same
ratio from the median gap between pieces and per second of process CPU time (every
thread) are recorded too: on a machine shared with other work, wall-clock pairs swing
widely, those much less.

Reuse: a client's second request (its whole history again, plus a short question) is
timed from sending it to its first text chunk, once on the server's cache of the first
request ("reuse") and once after the server forgot every conversation ("fresh"); the
first request is sent again before every reuse run so each pair measures the same.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

from app.bench.context import SYSTEM_PROMPT, BenchContext, greedy, kv_settings
from app.bench.results import PartResult, Row, yes_no
from app.bench.settings import TARGETS
from app.bench.stats import pair_ratios, spread_text, summarize
from app.core.engine.events import GenerationEvent

NAME = "server"
TITLE = "Local server vs the engine directly"
SPEED_KEY = "server_vs_engine"
REUSE_KEY = "server_reuse_vs_fresh"
FIRST_REPLY_TOKENS = 32
QUESTION = "Thanks. Which of those numbers was the largest, and why does it matter?"
# Unquantized, as the engine-overhead comparison: the fastest decode on this CPU, so
# the server's fixed per-token cost weighs the most.
KV_BITS_USED = 16
MODEL = "swapless"


def available(ctx: BenchContext) -> str | None:
    """Needs the server's HTTP stack (a dependency of Swapless)."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return f"the server's HTTP stack is not installed ({exc})"
    return None


def _start_server(ctx: BenchContext):
    from app.core.presets.presets import get_preset
    from app.server.config import ServerConfig
    from app.server.local_server import LocalServer

    preset = get_preset("chat").with_changes(
        kv_bits=KV_BITS_USED, temperature=0.0, top_p=1.0, max_context=32768
    )
    # Normal pressure throughout: a trim or a cache drop mid-run would measure
    # something else.
    server = LocalServer(
        ctx.engine, ServerConfig(preset=preset, port=0), pressure=lambda: "normal"
    )
    server.start()
    return server


def _post(port: int, body: dict) -> dict:
    """Send one chat request and read its stream; time every text piece."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    connection.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps(
            {**body, "stream": True, "stream_options": {"include_usage": True}}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    response = connection.getresponse()
    if response.status != 200:
        raise RuntimeError(
            f"the server answered {response.status}: {response.read()!r}"
        )
    times, cpu, parts = [], [], []
    usage: dict = {}
    while True:
        line = response.readline()
        if not line or line.strip() == b"data: [DONE]":
            break
        if not line.startswith(b"data: "):
            continue
        chunk = json.loads(line[6:])
        usage = chunk.get("usage") or usage
        for choice in chunk["choices"]:
            text = choice["delta"].get("content")
            if text:
                times.append(time.perf_counter())
                cpu.append(time.process_time())
                parts.append(text)
    connection.close()
    tokens = usage.get("completion_tokens", len(times))
    return {
        "tps": _decode_tps(times, tokens),
        "cpu_tps": _decode_tps(cpu, tokens),
        "median_gap_tps": _median_gap_tps(times),
        "ttft_s": times[0] - started if times else None,
        "pieces": len(times),
        "text": "".join(parts),
        "cached_tokens": usage.get("prompt_tokens_details", {}).get("cached_tokens"),
    }


def _decode_tps(times: list[float], tokens: int) -> float:
    """Tokens after the first, per second between the first and the last text piece.

    Counted in tokens, not pieces: when the HTTP loop falls behind it merges the
    deltas waiting for it into one chunk.
    """
    if len(times) < 2 or times[-1] <= times[0]:
        return 0.0
    return (tokens - 1) / (times[-1] - times[0])


def _median_gap_tps(times: list[float]) -> float:
    """Pieces/s from the median gap between pieces: blind to a few stalls."""
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    middle = gaps[len(gaps) // 2] if gaps else 0.0
    return 1.0 / middle if middle > 0 else 0.0


def _engine_run(ctx: BenchContext, messages: list[dict], tokens: int) -> dict:
    engine, key = ctx.engine, "bench-server-direct"
    engine.drop_cache(key)
    handle = engine.chat(key, messages, kv_settings(KV_BITS_USED), greedy(tokens))
    times, cpu, parts = [], [], []
    for event in handle:
        if isinstance(event, GenerationEvent) and event.text:
            times.append(time.perf_counter())
            cpu.append(time.process_time())
            parts.append(event.text)
    engine.drop_cache(key)
    final = handle.final
    assert final is not None, "set once the handle's events are read to the end"
    tokens = final.generated_tokens
    return {
        "tps": _decode_tps(times, tokens),
        "cpu_tps": _decode_tps(cpu, tokens),
        "median_gap_tps": _median_gap_tps(times),
        "pieces": len(times),
        "text": "".join(parts),
    }


def _server_run(server, messages: list[dict], tokens: int) -> dict:
    server.forget_conversations()
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": tokens,
        "temperature": 0,
    }
    return _post(server.status().port, body)


def _speed(ctx: BenchContext, server) -> tuple[dict, list[Row]]:
    s = ctx.settings
    prompt_text = ctx.filler(s.overhead_prompt_tokens, seed=1)
    messages = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": prompt_text},
    ]
    tokens = s.overhead_decode_tokens
    _engine_run(ctx, messages, tokens)  # untimed: kernels compile, pools grow
    _server_run(server, messages, tokens)
    direct, served = [], []
    for pair in range(s.server_pairs):
        if pair % 2 == 0:
            direct.append(_engine_run(ctx, messages, tokens))
            served.append(_server_run(server, messages, tokens))
        else:
            served.append(_server_run(server, messages, tokens))
            direct.append(_engine_run(ctx, messages, tokens))
    ratios = summarize(
        pair_ratios([r["tps"] for r in served], [r["tps"] for r in direct])
    )
    cpu_ratios = summarize(
        pair_ratios([r["cpu_tps"] for r in served], [r["cpu_tps"] for r in direct])
    )
    gap_ratios = summarize(
        pair_ratios(
            [r["median_gap_tps"] for r in served], [r["median_gap_tps"] for r in direct]
        )
    )
    same = all(a["text"] == b["text"] for a, b in zip(served, direct, strict=True))
    figures: dict[str, Any] = {
        "prompt_tokens": len(ctx.engine.render(messages)),
        "decode_tokens": tokens,
        "kv_bits": KV_BITS_USED,
        "server_decode_tps": summarize([r["tps"] for r in served]),
        "engine_decode_tps": summarize([r["tps"] for r in direct]),
        "server_pieces": [r["pieces"] for r in served],
        "engine_pieces": [r["pieces"] for r in direct],
        "same_greedy_text": same,
        "ratio": ratios,
        "ratio_from_cpu_time": cpu_ratios,
        "ratio_from_median_gap": gap_ratios,
    }
    met = TARGETS[SPEED_KEY].holds(ratios["median"])
    rows = [
        Row(
            f"Decode tok/s through the server (SSE) ÷ the engine directly "
            f"({KV_BITS_USED}-bit KV, {figures['prompt_tokens']}-token prompt, "
            f"{tokens} tokens)",
            f"{ratios['median']:.3f}",
            spread_text(ratios, 3),
            TARGETS[SPEED_KEY].text(),
            yes_no(met),
        ),
        Row(
            "Same, from the median gap between pieces (robust to stalls)",
            f"{gap_ratios['median']:.3f}",
            spread_text(gap_ratios, 3),
        ),
        Row(
            "Same, per second of process CPU time (all threads: client, HTTP, engine)",
            f"{cpu_ratios['median']:.3f}",
            spread_text(cpu_ratios, 3),
        ),
        Row(
            "Decode tok/s: server / engine (absolute)",
            f"{figures['server_decode_tps']['median']:.1f} / "
            f"{figures['engine_decode_tps']['median']:.1f}",
        ),
    ]
    return {"figures": figures, "ratios": ratios, "met": met}, rows


def _reuse(ctx: BenchContext, server) -> tuple[dict, list[Row]]:
    s = ctx.settings
    port = server.status().port
    first = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": ctx.filler(s.server_reuse_tokens, seed=3)},
    ]

    def send(messages: list[dict], tokens: int) -> dict:
        body = {"model": MODEL, "messages": messages, "max_tokens": tokens}
        return _post(port, {**body, "temperature": 0})

    server.forget_conversations()
    reply = send(first, FIRST_REPLY_TOKENS)["text"]
    second = [
        *first,
        {"role": "assistant", "content": reply},
        {"role": "user", "content": QUESTION},
    ]

    def with_reuse() -> dict:
        server.forget_conversations()
        send(first, FIRST_REPLY_TOKENS)
        return send(second, 2)

    def fresh() -> dict:
        server.forget_conversations()
        return send(second, 2)

    with_reuse()  # untimed warm-up
    reused_runs, fresh_runs = [], []
    for pair in range(s.server_reuse_pairs):
        if pair % 2 == 0:
            reused_runs.append(with_reuse())
            fresh_runs.append(fresh())
        else:
            fresh_runs.append(fresh())
            reused_runs.append(with_reuse())
    reused = [r["ttft_s"] for r in reused_runs]
    fresh_times = [r["ttft_s"] for r in fresh_runs]
    ratios = summarize(pair_ratios(reused, fresh_times))
    met = TARGETS[REUSE_KEY].holds(ratios["median"])
    prompt_tokens = len(ctx.engine.render(second))
    figures: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "reuse_ttft_s": summarize(reused),
        "fresh_ttft_s": summarize(fresh_times),
        "reuse_cached_tokens": [r["cached_tokens"] for r in reused_runs],
        "fresh_cached_tokens": [r["cached_tokens"] for r in fresh_runs],
        "ratio": ratios,
    }
    rows = [
        Row(
            f"2nd-request TTFT with the server's cache ÷ without, {prompt_tokens}-token "
            f"prompt ({KV_BITS_USED}-bit KV)",
            f"{ratios['median']:.3f}",
            spread_text(ratios, 3),
            TARGETS[REUSE_KEY].text(),
            yes_no(met),
        ),
        Row(
            f"2nd-request TTFT with / without reuse, {prompt_tokens} tokens (absolute)",
            f"{figures['reuse_ttft_s']['median']:.3f} s / "
            f"{figures['fresh_ttft_s']['median']:.3f} s",
        ),
    ]
    return {"figures": figures, "ratios": ratios, "met": met}, rows


def run(ctx: BenchContext) -> PartResult:
    """Measure both comparisons on one server."""
    server = _start_server(ctx)
    try:
        speed, speed_rows = _speed(ctx, server)
        reuse, reuse_rows = _reuse(ctx, server)
    finally:
        server.forget_conversations()
        server.stop()
    result = PartResult()
    result.figures = {"decode": speed["figures"], "reuse": reuse["figures"]}
    for key, part in ((SPEED_KEY, speed), (REUSE_KEY, reuse)):
        result.ratios[key] = part["ratios"]["median"]
        result.ratio_stats[key] = part["ratios"]
        result.targets_met[key] = part["met"]
    result.rows = speed_rows + reuse_rows
    if not speed["figures"]["same_greedy_text"]:
        result.notes.append(
            "The server's and the engine's greedy replies differed; check the settings."
        )
    ci = speed["ratios"].get("median_ci95")
    if ci:
        target = TARGETS[SPEED_KEY]
        if target.holds(ci[0]) != target.holds(ci[1]):
            result.notes.append(
                f"The server/engine speed ratio's 95% CI ({ci[0]:.3f}–{ci[1]:.3f}) "
                f"contains the target {target.text()}: this run cannot tell whether it "
                "holds (pairs are noisy on a shared two-core machine)."
            )
    return result
