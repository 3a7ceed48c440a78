"""A tiny model that answers every chat with the same short greeting, then stops.

Agents' CLIs treat a reply cut at ``max_tokens`` as an error, and a random-weight model
never writes its end token. This one is the tiny random model made into a bigram
table: every layer's output projections are zero, so the last hidden state is the
embedding of the last token, and an untied output matrix maps the generation prompt's
last token to the greeting's first token, each greeting token to the next, and the
last one to the end token. Built in well under a second from the tiny model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

GREETING = " Hello from Swapless"


def build_greeting_model(tiny: Path, folder: Path) -> Path:
    """Copy the tiny model at ``tiny`` into ``folder`` and make it greet."""
    import mlx.core as mx
    from tokenizers import Tokenizer

    shutil.copytree(tiny, folder, dirs_exist_ok=True)
    config = json.loads((folder / "config.json").read_text())
    config["tie_word_embeddings"] = False
    # Agents' prompts are long (Codex's is ~18K tokens); a bigram model has no use
    # for positions, so any context is as good as the trained one.
    config["max_position_embeddings"] = 32768
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    end = tokenizer.token_to_id("<|im_end|>")
    start = tokenizer.encode("<|im_start|>assistant\n").ids[-1]
    words = tokenizer.encode(GREETING).ids
    chain = [start, *words, end]
    (folder / "model.safetensors.index.json").unlink(missing_ok=True)
    weights = dict(mx.load(str(folder / "model.safetensors")))
    for name in list(weights):
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(weights[name])
    embed = weights["model.embed_tokens.weight"].astype(mx.float32)
    norm = weights["model.norm.weight"].astype(mx.float32)
    head = mx.zeros_like(embed)
    for previous, following in zip(chain, chain[1:], strict=False):
        state = embed[previous] * mx.rsqrt(mx.mean(embed[previous] ** 2) + 1e-5) * norm
        head[following] = head[following] + 50 * state / mx.linalg.norm(state)
    weights["lm_head.weight"] = head.astype(embed.dtype)
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder
