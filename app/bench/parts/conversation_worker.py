"""One side of the long-conversation benchmark, in a process of its own.

Process memory (RSS) cannot be split between two conversations in one process, so each
condition (auto-trim on, auto-trim off) runs in its own worker process. The parent
sends one JSON command per line on stdin and waits for the answer before it sends the
next command to the other worker, so the two run interleaved turn by turn and never
compete for the CPU. Answers are single stdout lines starting with `MARKER`; anything
else a library prints is ignored.
"""

from __future__ import annotations

import json
import resource
import sys
import time

MARKER = "@@swapless-bench "


def _emit(data: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(data) + "\n")
    sys.stdout.flush()


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # KiB on Linux


def main(argv: list[str]) -> int:
    """Run a stored conversation turn by turn as the parent asks.

    Args:
        argv: One JSON object: ``model``, ``db``, ``max_context``, ``max_tokens``.
    """
    import psutil

    from app.core.chat.conversation_session import ConversationSession
    from app.core.engine.engine import Engine
    from app.core.presets.presets import get_preset
    from app.core.store import Store

    config = json.loads(argv[0])
    process = psutil.Process()
    started = time.perf_counter()
    engine = Engine()
    info = engine.load(config["model"])
    store = Store.open(config["db"])
    preset = get_preset("chat").with_changes(
        max_context=config["max_context"],
        summary_mode="extractive",
        max_tokens=config["max_tokens"],
        temperature=0.0,
        top_p=1.0,
    )
    session = ConversationSession.start(
        engine, store, preset, model=info.folder, seed=0
    )
    _emit(
        {
            "ready": True,
            "load_s": time.perf_counter() - started,
            "rss_bytes": process.memory_info().rss,
            "kv_bits": preset.kv_bits,
            "max_context": preset.max_context,
        }
    )
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("op") != "turn":
            break
        turn_started = time.perf_counter()
        report = session.send(command["text"]).wait()
        wall = time.perf_counter() - turn_started
        state = engine.cache_state(session.cache_key)
        active, cache, _ = engine.mlx_memory()
        _emit(
            {
                "turn": command["turn"],
                "wall_s": wall,
                "prompt_tokens": report.prompt_tokens,
                "reused_tokens": report.reused_tokens,
                "new_tokens": report.new_tokens,
                "generated_tokens": report.generated_tokens,
                "context_tokens": state.tokens,
                "kv_bytes": state.kv_bytes,
                "ttft_s": report.ttft_s,
                "decode_tps": report.tokens_per_s,
                "trimmed": report.trimmed,
                "trim_ms": report.trim_ms,
                "trim_method": report.trim_method,
                "trim_note": report.trim_note,
                "rss_bytes": process.memory_info().rss,
                "peak_rss_bytes": _peak_rss_bytes(),
                "mlx_active_bytes": active,
                "mlx_cache_bytes": cache,
                "mlx_turn_peak_bytes": report.peak_memory_bytes,
            }
        )
    engine.shutdown()
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
