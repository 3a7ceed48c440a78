"""Held-out figures of a reference model folder: perplexity, unigram baseline, recall.

Measured on the loaded folder, through the same loading, chat template and scoring
code as `swapless check-quality`, on documents training never saw (`corpus`), with
task seeds training never used. Recall is greedy and exact: every answer token must be
the argmax (`quality_scoring.answer_correct`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from tokenizers import Tokenizer

from app.core.engine.loader import LoadedModel
from app.core.engine.quality import quality_scoring as scoring
from app.core.modelkit.reference import corpus
from app.core.presets.generation_settings import KVSettings
from app.core.quality import recall_tasks

EVALUATION_SEED = 777
PASS_KEY_DISTANCES = (64, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class EvaluationSizes:
    """How many held-out samples to score.

    Attributes:
        text_windows: Held-out text windows for perplexity.
        window_tokens: Tokens per window.
        pass_keys: Pass keys per distance.
        distances: Pass-key distances (filler tokens).
        other_tasks: Key→value, copy and chat-fact tasks each.
    """

    text_windows: int = 32
    window_tokens: int = 512
    pass_keys: int = 30
    distances: tuple[int, ...] = PASS_KEY_DISTANCES
    other_tasks: int = 30


@dataclass
class Evaluation:
    """Held-out figures (JSON-serializable via `as_dict`).

    Attributes:
        held_out_tokens: Tokens scored for perplexity.
        perplexity: The model's held-out perplexity.
        unigram_perplexity: A unigram model's (training-set token frequencies,
            add-one smoothed) on the same tokens.
        pass_key: Distance → share of pass keys recalled.
        key_value: Share of 4–40 pair table lookups answered.
        copy: Share of copy tasks continued exactly for 24 tokens after a 4-token
            lead-in.
        copy_token_accuracy: Of those 24 tokens, the share predicted right
            (teacher-forced).
        chat_fact: Share of conversation facts recalled after filler turns.
        kv_bits: The KV precision it was measured with.
    """

    held_out_tokens: int = 0
    perplexity: float = 0.0
    unigram_perplexity: float = 0.0
    pass_key: dict[int, float] = field(default_factory=dict)
    key_value: float = 0.0
    copy: float = 0.0
    copy_token_accuracy: float = 0.0
    chat_fact: float = 0.0
    kv_bits: int = 16

    def as_dict(self) -> dict:
        """A JSON-serializable dict."""
        data = asdict(self)
        data["pass_key"] = {str(k): v for k, v in self.pass_key.items()}
        return data


def held_out_stream(folder) -> corpus.TokenStream:
    """The held-out documents, tokenized with the folder's tokenizer."""
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return corpus.TokenStream(tokenizer, [d for d in corpus.documents() if d.held_out])


def unigram_perplexity(tokenizer: Tokenizer, ids: np.ndarray, vocab: int) -> float:
    """Perplexity of training-set unigram frequencies (add-one) on ``ids``."""
    train = corpus.TokenStream(
        tokenizer, [d for d in corpus.documents() if not d.held_out]
    )
    counts = np.bincount(train.ids, minlength=vocab).astype(np.float64) + 1.0
    log_p = np.log(counts / counts.sum())
    return float(math.exp(-log_p[ids].mean()))


def text_perplexity(
    model: nn.Module, stream: corpus.TokenStream, sizes: EvaluationSizes
) -> tuple[float, int, np.ndarray]:
    """Perplexity on consecutive held-out windows; also the ids it scored."""
    length = sizes.window_tokens
    windows = [
        stream.ids[i * (length + 1) : (i + 1) * (length + 1)]
        for i in range(sizes.text_windows)
    ]
    windows = [w for w in windows if len(w) == length + 1]
    nll, count = 0.0, 0
    for window in windows:
        x = mx.array(window)[None]
        logits = model(x[:, :-1]).astype(mx.float32)
        loss = nn.losses.cross_entropy(logits, x[:, 1:], reduction="sum")
        item = loss.item()
        assert not isinstance(item, complex), "a cross-entropy sum is real"
        nll += float(item)
        count += length
    scored = np.concatenate([w[1:] for w in windows]) if windows else np.zeros(0, int)
    return math.exp(nll / max(count, 1)), count, scored


def _recall(
    loaded: LoadedModel,
    chat: scoring.ChatRenderer,
    tasks: list[recall_tasks.RecallTask],
    kv: KVSettings,
) -> float:
    hits = 0
    chunk = scoring.chunk_size(int(loaded.config.get("vocab_size") or 0))
    for task in tasks:
        question = scoring.task_question(chat, task)
        cache = scoring.new_cache(loaded.model, kv)
        hits += bool(
            scoring.answer_correct(
                loaded.model, cache, question.lead_ids, question.answer_ids, chunk
            )
        )
    return hits / len(tasks) if tasks else 0.0


def evaluate(
    loaded: LoadedModel,
    sizes: EvaluationSizes = EvaluationSizes(),
    kv: KVSettings = scoring.FULL_PRECISION,
    log: Callable[[str], None] = lambda _: None,
) -> Evaluation:
    """Measure a loaded reference model on held-out data.

    Args:
        loaded: The model folder, loaded (engine thread, or any single thread).
        sizes: Sample counts.
        kv: KV precision of the recall probes.
        log: Receives a line per finished measurement.
    """
    folder = Path(loaded.info.folder)
    stream = held_out_stream(folder)
    chat = scoring.ChatRenderer(loaded.tokenizer)
    result = Evaluation(kv_bits=kv.bits)
    if sizes.text_windows:
        ppl, count, scored = text_perplexity(loaded.model, stream, sizes)
        result.perplexity, result.held_out_tokens = ppl, count
        result.unigram_perplexity = unigram_perplexity(
            stream.tokenizer, scored, int(loaded.config["vocab_size"])
        )
        log(f"held-out perplexity {ppl:.2f} (unigram {result.unigram_perplexity:.1f})")
    for distance in sizes.distances:
        # One seed per distance: a distance's probes are the same whichever others run.
        rng = random.Random(f"{EVALUATION_SEED}:pass_key:{distance}")
        tasks = [
            recall_tasks.pass_key_task(rng, distance, stream.filler)
            for _ in range(sizes.pass_keys)
        ]
        result.pass_key[distance] = _recall(loaded, chat, tasks, kv)
        log(f"pass key at {distance}: {result.pass_key[distance]:.0%}")
    if sizes.other_tasks:
        n = sizes.other_tasks
        rng = random.Random(f"{EVALUATION_SEED}:key_value")
        result.key_value = _recall(
            loaded,
            chat,
            [recall_tasks.key_value_task(rng, 40, stream.filler) for _ in range(n)],
            kv,
        )
        rng = random.Random(f"{EVALUATION_SEED}:chat_fact")
        result.chat_fact = _recall(
            loaded,
            chat,
            [recall_tasks.chat_fact_task(rng, 384, stream.filler) for _ in range(n)],
            kv,
        )
        copies = _copy_tasks(random.Random(f"{EVALUATION_SEED}:copy"), stream, n)
        result.copy = _recall(loaded, chat, copies, kv)
        result.copy_token_accuracy = _token_accuracy(loaded, chat, copies)
        log(
            f"key-value {result.key_value:.0%}, chat facts {result.chat_fact:.0%}, "
            f"copy {result.copy:.0%}"
        )
    return result


def _token_accuracy(loaded, chat, tasks) -> float:
    """Mean share of answer tokens that are the argmax, each after the true ones."""
    shares = []
    for task in tasks:
        question = scoring.task_question(chat, task)
        ids = question.lead_ids + question.answer_ids
        logits = loaded.model(mx.array(ids[:-1])[None])[0, len(question.lead_ids) - 1 :]
        predicted = mx.argmax(logits, axis=-1).tolist()
        assert isinstance(predicted, list), "argmax over a row of positions"
        right = sum(p == a for p, a in zip(predicted, question.answer_ids, strict=True))
        shares.append(right / len(question.answer_ids))
    return sum(shares) / len(shares) if shares else 0.0


def _copy_tasks(rng, stream, n) -> list[recall_tasks.RecallTask]:
    """Copy tasks: the reply's first 4 tokens are given, the next 24 must follow.

    Where a copy starts cannot be inferred from the three tokens before it (they are
    the reply's header), so, as for every other task, the lead-in is teacher-forced
    and what is scored is the continuation.
    """
    tasks = []
    encode, decode = stream.tokenizer.encode, stream.tokenizer.decode
    for _ in range(n):
        task = recall_tasks.copy_task(rng, 48, stream.filler)
        ids = encode(task.answer).ids
        lead, body = decode(ids[:4]), decode(ids[4:28])
        reply = lead + body
        if body.strip() and reply in task.answer:
            messages = (*task.messages[:-1], {"role": "assistant", "content": reply})
            tasks.append(recall_tasks.RecallTask("copy", messages, body, task.distance))
    return tasks


def training_recall(
    model: nn.Module, tokenizer: Tokenizer, distance: int = 512, count: int = 8
) -> float:
    """Pass-key recall of a model still in training (raw tokenizer, ChatML by hand).

    A cheap watch on the copy circuit while training runs; the figures that count are
    `evaluate`'s, on the saved folder.
    """
    stream = corpus.TokenStream(
        tokenizer, [d for d in corpus.documents() if d.held_out]
    )
    rng = random.Random(EVALUATION_SEED + distance)
    hits = 0
    for _ in range(count):
        task = recall_tasks.pass_key_task(rng, distance, stream.filler)
        prompt = corpus.render_chatml(task.question) + "<|im_start|>assistant\n"
        prompt += task.reply_prefix.rstrip()
        full = tokenizer.encode(prompt + " " + task.answer).ids
        cut = len(tokenizer.encode(prompt).ids)
        logits = model(mx.array(full[:-1])[None])[0, cut - 1 :]
        hits += mx.argmax(logits, axis=-1).tolist() == full[cut:]
    return hits / count
