"""Measure the reference model's reasoning and tool-call format on held-out data.

Greedy generation, exactly as a user would get it, on tasks built from the held-out
documents (so tool arguments are words training never used as arguments):

* **thinking on**: the reply opens ``<think>``, closes it, and the answer after it
  holds the pass key (pass keys 64–256 tokens back);
* **thinking off**: the prompt ends with the empty block, the answer holds the key and
  no ``<think>`` is written;
* **tool call**: given 1–5 tools and a question, the reply has one ``<tool_call>``
  whose JSON names the right tool and copies the argument exactly (thinking on and off),
  counted apart for each kind of question (`format_tasks.tool_task`): a catalogue
  tool asked in words, a tool never seen in training named in the question (with
  one argument, or none);
* **tool result**: after the ``<tool_response>``, the answer repeats the result.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.models.cache import make_prompt_cache

from app.core.engine.loader import LoadedModel
from app.core.modelkit.reference import corpus, format_tasks
from app.core.quality import recall_tasks

FORMAT_SEED = 4242
_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)


@dataclass
class FormatEvaluation:
    """Shares of held-out probes the model got right (0–1), and a few samples."""

    probes: int = 0
    thinking_opens: float = 0.0
    thinking_closes: float = 0.0
    thinking_answer: float = 0.0
    no_thinking_answer: float = 0.0
    no_thinking_clean: float = 0.0
    tool_call_parsed: float = 0.0
    tool_call_name: float = 0.0
    tool_call_argument: float = 0.0
    tool_call_no_thinking: float = 0.0
    tool_call_by_kind: dict[str, float] = field(default_factory=dict)
    tool_result_answer: float = 0.0
    samples: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-serializable dict."""
        return asdict(self)


def _generate(loaded: LoadedModel, prompt: str, max_tokens: int) -> str:
    tokenizer = loaded.tokenizer
    ids = tokenizer.encode(prompt, add_special_tokens=False)
    cache = make_prompt_cache(loaded.model)
    out: list[int] = []
    eos = set(tokenizer.eos_token_ids)
    for token, _ in generate_step(
        mx.array(ids), loaded.model, max_tokens=max_tokens, prompt_cache=cache
    ):
        if int(token) in eos:
            break
        out.append(int(token))
    return tokenizer.decode(out)


def _answer(reply: str) -> str:
    return reply.split("</think>")[-1]


def _call(reply: str) -> dict | None:
    match = _CALL.search(reply)
    if not match:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def evaluate_format(
    loaded: LoadedModel, probes: int = 20, log=lambda _: None
) -> FormatEvaluation:
    """Run every probe ``probes`` times (seeded) and return the shares right."""
    from pathlib import Path

    from app.core.modelkit.reference.evaluation import held_out_stream

    stream = held_out_stream(Path(loaded.info.folder))
    words = format_tasks.argument_words(
        [d.text for d in corpus.documents() if d.held_out]
    )
    tok = loaded.tokenizer
    result = FormatEvaluation(probes=probes)
    rng = random.Random(FORMAT_SEED)
    n = probes
    for _ in range(n):
        task = recall_tasks.pass_key_task(
            rng, rng.choice((64, 128, 256)), stream.filler
        )
        question = list(task.question)
        on = tok.apply_chat_template(
            question, add_generation_prompt=True, tokenize=False, enable_thinking=True
        )
        reply = _generate(loaded, on, 120)
        result.samples.setdefault("thinking", reply)
        result.thinking_opens += reply.lstrip().startswith("<think>") / n
        result.thinking_closes += ("</think>" in reply) / n
        result.thinking_answer += (
            "</think>" in reply and task.answer in _answer(reply)
        ) / n
        off = tok.apply_chat_template(
            question, add_generation_prompt=True, tokenize=False, enable_thinking=False
        )
        reply = _generate(loaded, off, 40)
        result.samples.setdefault("no_thinking", reply)
        result.no_thinking_answer += (task.answer in reply) / n
        result.no_thinking_clean += ("<think>" not in reply) / n
    log(
        f"thinking: opens {result.thinking_opens:.0%}, closes "
        f"{result.thinking_closes:.0%}, answer {result.thinking_answer:.0%}; "
        f"off: answer {result.no_thinking_answer:.0%}"
    )
    kinds = ("catalogue", "named", "no_argument")
    per_kind = {kind: 0 for kind in kinds}
    for i in range(n):
        kind = kinds[i % len(kinds)]
        tool_task = format_tasks.tool_task(rng, words, kind=kind)
        asked = [tool_task.messages[0]]
        thinking = i % 2 == 0
        prompt = tok.apply_chat_template(
            asked,
            tools=list(tool_task.tools),
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=thinking,
        )
        reply = _generate(loaded, prompt, 120)
        result.samples.setdefault(f"tool_call_thinking_{thinking}", reply)
        call = _call(_answer(reply))
        arguments = call.get("arguments") if call else None
        right_name = call is not None and call.get("name") == tool_task.tool.name
        right_value = arguments == tool_task.tool.arguments(tool_task.value)
        per_kind[kind] += bool(right_name and right_value)
        result.tool_call_parsed += (call is not None) / n
        result.tool_call_name += right_name / n
        result.tool_call_argument += (right_name and right_value) / n
        if not thinking:
            result.tool_call_no_thinking += (right_name and right_value) / (n / 2)
        # The tool's result: the reply to it repeats it.
        history = [dict(m) for m in tool_task.messages[:-1]]
        prompt = tok.apply_chat_template(
            history,
            tools=list(tool_task.tools),
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=thinking,
        )
        reply = _generate(loaded, prompt, 80)
        result.samples.setdefault("tool_result", reply)
        result.tool_result_answer += (tool_task.result in _answer(reply)) / n
    result.tool_call_by_kind = {
        kind: per_kind[kind] / len(range(kinds.index(kind), n, len(kinds)))
        for kind in kinds
        if kinds.index(kind) < n
    }
    log(
        f"tool calls: parsed {result.tool_call_parsed:.0%}, name "
        f"{result.tool_call_name:.0%}, name+argument {result.tool_call_argument:.0%} "
        f"({', '.join(f'{k} {v:.0%}' for k, v in result.tool_call_by_kind.items())}); "
        f"answers from results {result.tool_result_answer:.0%}"
    )
    return result
