"""The single-tool probes: does the reference model call a catalogue tool on held-out values?

Each probe offers one catalogue tool (`format_tasks.TOOLS`) alone, asks for it in one
of its question shapes with a value drawn from the held-out documents (a word training
never used as an argument), and reads the raw greedy output, without the grammar
Swapless puts on a call once the model opens it:

* **call**: the reply holds one ``<tool_call>`` whose JSON names the tool and copies
  the value exactly;
* **answer**: after the right call and the tool's result, the answer holds the result.

Three groups, 40 probes in all (the tools in turn): 20 with the value quoted and
thinking on, 10 quoted with thinking off, 10 with the value unquoted (thinking on and
off in turn). Run ``python -m app.core.modelkit.reference.tool_probes FOLDER``.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.core.engine.loader import LoadedModel
from app.core.modelkit.reference import corpus, format_tasks
from app.core.modelkit.reference.format_evaluation import _answer, _call, _generate

TOOL_PROBE_SEED = 5151
# (group, probes, value quoted, thinking: True, False, or None for in turn)
GROUPS = (
    ("quoted_thinking", 20, True, True),
    ("quoted_no_thinking", 10, True, False),
    ("unquoted", 10, False, None),
)


@dataclass
class ToolProbeResult:
    """Right calls and answers per group (counts), and the failures' replies."""

    probes: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    answers: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        """A JSON-serializable dict."""
        return asdict(self)

    def summary(self) -> str:
        """One line: calls and answers right per group."""
        return "; ".join(
            f"{group}: call {self.calls[group]}/{n}, answer {self.answers[group]}/{n}"
            for group, n in self.probes.items()
        )


def held_out_words() -> list[str]:
    """Argument values from the held-out documents (never arguments in training)."""
    return format_tasks.argument_words(
        [d.text for d in corpus.documents() if d.held_out]
    )


def run_tool_probes(
    loaded: LoadedModel, words: list[str] | None = None, log=lambda _: None
) -> ToolProbeResult:
    """Run the 40 single-tool probes (seeded) on ``loaded``."""
    words = words if words is not None else held_out_words()
    tok = loaded.tokenizer
    rng = random.Random(TOOL_PROBE_SEED)
    result = ToolProbeResult()
    index = 0
    for group, count, quoted, thinking_mode in GROUPS:
        result.probes[group] = count
        result.calls[group] = result.answers[group] = 0
        for i in range(count):
            tool = format_tasks.TOOLS[index % len(format_tasks.TOOLS)]
            index += 1
            thinking = thinking_mode if thinking_mode is not None else i % 2 == 0
            task = format_tasks.single_tool_task(rng, words, tool, quoted)
            tools = list(task.tools)
            prompt = tok.apply_chat_template(
                [task.messages[0]],
                tools=tools,
                add_generation_prompt=True,
                tokenize=False,
                enable_thinking=thinking,
            )
            reply = _generate(loaded, prompt, 120)
            call = _call(_answer(reply))
            right = (
                call is not None
                and call.get("name") == tool.name
                and call.get("arguments") == tool.arguments(task.value)
            )
            result.calls[group] += right
            history = [dict(m) for m in task.messages[:-1]]
            prompt = tok.apply_chat_template(
                history,
                tools=tools,
                add_generation_prompt=True,
                tokenize=False,
                enable_thinking=thinking,
            )
            answer = _generate(loaded, prompt, 80)
            repeated = task.result in _answer(answer)
            result.answers[group] += repeated
            if not right:
                result.failures.append(f"{task.messages[0]['content']!r} -> {reply!r}")
            if not repeated:
                result.failures.append(f"{task.result!r} -> {answer!r}")
    log(result.summary())
    return result


def main(argv: list[str]) -> int:
    """``tool_probes FOLDER [--failures]``: print the figures (and failures) as JSON."""
    from app.core.engine.loader import load_model_folder

    if not argv:
        print("usage: tool_probes FOLDER [--failures]", file=sys.stderr)
        return 2
    loaded = load_model_folder(Path(argv[0]))
    result = run_tool_probes(loaded)
    figures = result.as_dict()
    if "--failures" not in argv:
        figures.pop("failures")
    print(json.dumps(figures, indent=1))
    print(result.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
