"""llama-cpp-python's side of the chat comparison, in the peers venv's own Python.

Runs as a script (``python llama_chat_worker.py CONFIG``) under the Python that
``make peers`` installed ``llama-cpp-python`` into: it imports only the standard
library and ``llama_cpp``, never the app (that venv has no MLX). The protocol is the
bench workers' (`app.bench.worker_process`): one JSON command per stdin line, one
answer per stdout line starting with `MARKER`.

The chat is what a llama-cpp-python user writes: one ``Llama`` (its defaults: f16 KV,
its prefix reuse between calls), ``create_chat_completion`` with the whole history each
turn, streamed so the first token's time is seen, the model's own chat template from
the GGUF. Replies are greedy; tokens that write no text (the end-of-sequence token, the
chat format's markers, unused vocabulary rows) are banned, so every reply is
``max_tokens`` tokens of text, as Swapless's side writes (``generated_tokens``
re-tokenizes the reply to check).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

MARKER = "@@llama-chat "


def _emit(data: dict) -> None:
    sys.stdout.write(MARKER + json.dumps(data) + "\n")
    sys.stdout.flush()


def _peak_rss_bytes() -> int:
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def main(argv: list[str]) -> int:
    """Load the GGUF, then answer ``turn`` commands until ``quit``.

    Args:
        argv: One JSON object: ``gguf``, ``threads``, ``n_ctx``, ``max_tokens``,
            ``system`` (the system prompt).
    """
    config = json.loads(argv[0])
    started = time.perf_counter()
    import llama_cpp  # type: ignore[import-not-found]  # the peers venv's, not ours

    threads = int(config["threads"])
    llm = llama_cpp.Llama(
        model_path=config["gguf"],
        n_ctx=int(config["n_ctx"]),
        n_threads=threads,
        n_threads_batch=threads,
        seed=0,
        verbose=False,
    )
    # Tokens that write no text are banned: the end-of-sequence token, the chat
    # format's markers, and the vocabulary's unused rows (a random-weight model's
    # embedding is padded to the checkpoint's 151,936 rows; its GGUF marks the
    # 135K beyond the trained BPE as unused, and greedy picks them as readily as any:
    # replies of 64 tokens came out as empty text). One numpy mask, applied per step.
    import numpy as np

    silent = np.array(
        [not llm.detokenize([i]) for i in range(llm.n_vocab())], dtype=bool
    )
    silent[llm.token_eos()] = True

    def speak(_input_ids, scores):
        scores[silent] = -np.inf
        return scores

    processors = llama_cpp.LogitsProcessorList([speak])
    messages = [{"role": "system", "content": config["system"]}]
    _emit(
        {
            "ready": True,
            "load_s": time.perf_counter() - started,
            "version": llama_cpp.__version__,
            "library": os.path.dirname(llama_cpp.__file__),
            "peak_rss_bytes": _peak_rss_bytes(),
        }
    )
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("op") != "turn":
            break
        messages.append({"role": "user", "content": command["text"]})
        turn_started = time.perf_counter()
        first = None
        pieces = []
        chunks = 0
        for chunk in llm.create_chat_completion(
            messages=messages,
            max_tokens=int(config["max_tokens"]),
            temperature=0.0,
            top_k=1,
            logits_processor=processors,
            stream=True,
        ):
            delta = chunk["choices"][0]["delta"]
            if delta.get("content"):
                if first is None:
                    first = time.perf_counter() - turn_started
                pieces.append(delta["content"])
                chunks += 1
        wall = time.perf_counter() - turn_started
        reply = "".join(pieces)
        messages.append({"role": "assistant", "content": reply})
        _emit(
            {
                "turn": command["turn"],
                "wall_s": wall,
                "ttft_s": first if first is not None else wall,
                "chunks": chunks,
                "generated_tokens": len(
                    llm.tokenize(reply.encode(), add_bos=False, special=True)
                ),
                "context_tokens": llm.n_tokens,
                "peak_rss_bytes": _peak_rss_bytes(),
            }
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
