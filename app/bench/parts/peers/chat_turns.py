"""A multi-turn chat, Swapless vs llama-cpp-python, turn by turn (issue 32's last row).

llama-bench measures prefill and decode alone; a user feels a conversation: each turn
a new message is prefilled on top of the history the runtime kept, then the reply is
decoded. So both sides hold one conversation of ``peers_chat_turns`` turns of the same
user messages (``peers_chat_user_tokens`` tokens of filler text each, the same system
prompt), ``peers_chat_max_tokens`` greedy tokens a reply, each in a process of its own
at the same thread count, interleaved turn by turn (llama-cpp-python first on even
turns, Swapless first on odd ones):

- llama-cpp-python (`llama_chat_worker`, the Python ``make peers`` installed it into):
  ``create_chat_completion`` with the whole history, its defaults (f16 KV, its prefix
  reuse), the Q4_0 GGUF of the peers part;
- Swapless (`swapless_worker`'s ``chat``): a `ConversationSession` with the default
  preset (8-bit KV, auto-trim) on the 4-bit folder of the same weights.

Each side answers with its own reply, so the two histories differ by what the replies
say (their lengths are the same unless a model ends a reply itself; llama-cpp-python's
end token is banned, Swapless's random-weight model is left as a user gets it, and the
tokens each side generated are recorded).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

from app.bench.context import BenchContext
from app.bench.parts.peers import llama_build, llama_chat_worker
from app.bench.results import Row, yes_no
from app.bench.worker_process import WorkerProcess

TARGET = 1.25
"""Issue 32: the chat's total time at most 1.25x llama-cpp-python's."""
SIDES = ("llama_cpp_python", "swapless")


def binding_missing(python: Path) -> str | None:
    """Why llama-cpp-python cannot run under ``python``, or None when it can."""
    if llama_build.python_imports(python, "llama_cpp"):
        return None
    return (
        f"llama-cpp-python is not installed for {python}: run `make peers` (it builds "
        "the binding from the same sdist)"
    )


def _llama_worker(
    python: Path, gguf: Path, threads: int, s, log: Path
) -> WorkerProcess:
    config = {
        "gguf": str(gguf),
        "threads": threads,
        # Room for the whole conversation: llama-cpp-python never trims by itself.
        "n_ctx": s.peers_chat_turns * (s.peers_chat_user_tokens * 2 + 96) + 1024,
        "max_tokens": s.peers_chat_max_tokens,
        "system": system_prompt(),
    }
    return WorkerProcess(
        "llama_chat_worker",
        config,
        marker=llama_chat_worker.MARKER,
        log_path=log,
        env=dict(os.environ, LD_PRELOAD=""),  # its own ggml, not the app's BLAS
        name="llama-cpp-python",
        quit_timeout=30,
        program=(str(python), llama_chat_worker.__file__),
    )


def system_prompt() -> str:
    """The default preset's system prompt, which both sides are given."""
    from app.core.presets.presets import DEFAULT_PRESET, get_preset

    return get_preset(DEFAULT_PRESET).system_prompt


def measure(
    ctx: BenchContext, python: Path, gguf: Path, swapless: dict, work: Path
) -> dict:
    """Hold the chat on both sides at every thread count; the per-turn figures.

    Args:
        ctx: The bench run.
        python: The Python with llama-cpp-python.
        gguf: The Q4_0 GGUF.
        swapless: Swapless's worker per thread count (its ``chat`` op holds the chat).
        work: Folder for the workers' logs.
    """
    s = ctx.settings
    texts = [
        f"Turn {turn + 1}. " + ctx.filler(s.peers_chat_user_tokens, seed=500 + turn)
        for turn in range(s.peers_chat_turns)
    ]
    found: dict = {}
    for threads, worker in swapless.items():
        llama = _llama_worker(
            python, gguf, threads, s, work / f"llama-chat-{threads}.log"
        )
        turns: dict[str, list] = {side: [] for side in SIDES}
        try:
            for turn, text in enumerate(texts):
                for side in SIDES if turn % 2 == 0 else SIDES[::-1]:
                    if side == "swapless":
                        got = worker.ask(op="chat", text=text)
                    else:
                        got = llama.ask(op="turn", turn=turn, text=text)
                    turns[side].append(got)
                ctx.log(
                    f"  peers chat, {threads} thread(s), turn {turn + 1}: "
                    f"llama-cpp-python {turns['llama_cpp_python'][-1]['wall_s']:.2f} s, "
                    f"Swapless {turns['swapless'][-1]['wall_s']:.2f} s"
                )
        finally:
            llama.close()
        found[str(threads)] = {"llama_ready": llama.ready, **turns}
    return found


def rows(s, found: dict) -> tuple[list[Row], dict]:
    """The table's rows (total time and first-token latency) and the ratios."""
    out: list[Row] = []
    ratios: dict = {}
    for threads, cell in found.items():
        total = {side: sum(t["wall_s"] for t in cell[side]) for side in SIDES}
        ttft = {
            side: statistics.median(t["ttft_s"] for t in cell[side]) for side in SIDES
        }
        ratio = total["swapless"] / total["llama_cpp_python"]
        ratios[f"threads_{threads}"] = {
            "chat_total_time": ratio,
            "chat_ttft": ttft["swapless"] / ttft["llama_cpp_python"],
        }
        made = {side: sum(t["generated_tokens"] for t in cell[side]) for side in SIDES}
        out.append(
            Row(
                f"{s.peers_chat_turns}-turn chat ({s.peers_chat_max_tokens} tokens a "
                f"reply), {threads} thread(s): total time Swapless ÷ llama-cpp-python "
                f"(Swapless {total['swapless']:.1f} s, {made['swapless']} tokens "
                f"written; llama-cpp-python {total['llama_cpp_python']:.1f} s, "
                f"{made['llama_cpp_python']})",
                f"{ratio:.2f}",
                target=f"≤ {TARGET:g}",
                held=yes_no(ratio <= TARGET),
            )
        )
        out.append(
            Row(
                f"… median time to first token per turn, Swapless ÷ llama-cpp-python "
                f"({ttft['swapless']:.2f} s vs {ttft['llama_cpp_python']:.2f} s)",
                f"{ratios[f'threads_{threads}']['chat_ttft']:.2f}",
            )
        )
    return out, ratios
