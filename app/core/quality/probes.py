"""The built-in probes of a quality check: texts, pass keys and trim conversations.

The texts ship under ``resources/quality`` (prose, code and a dialogue written for
Swapless, so any model can be probed offline and the numbers are comparable from one
machine to the next). A fourth text repeats the start of the prose: predicting a
passage seen before is pure context reading, the part compression damages most. Pass
keys and conversation facts are generated from a fixed seed with the texts as filler,
so two runs of the same probe set ask exactly the same questions.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from app.core.files import paths
from app.core.quality import recall_tasks
from app.core.quality.recall_tasks import RecallTask

TEXT_FILES = ("prose.txt", "code.txt", "dialogue.txt")
# Bumped whenever a probe changes, so results measured on other probes are not mixed
# with new ones (part of the stored settings key).
PROBE_VERSION = 1
SEED = 20261201
SYSTEM_PROMPT = "You are a helpful assistant."


@dataclass(frozen=True)
class ProbeSizes:
    """How much of each probe kind a check uses.

    Attributes:
        name: ``quick`` or ``full``.
        text_tokens: Tokens scored per text (None: the whole text).
        pass_key_distances: Filler tokens between a key and its question.
        pass_keys_per_distance: Keys asked at each distance.
        trim_cases: Conversations trimmed.
        dropped_tokens: Filler in the turns a trim drops.
        kept_tokens: Filler in the turns it keeps.
    """

    name: str
    text_tokens: int | None
    pass_key_distances: tuple[int, ...]
    pass_keys_per_distance: int
    trim_cases: int
    dropped_tokens: int
    kept_tokens: int


# Quantized attention over many queries is slow on CPU (shared/NOTES-mlx.md), and pass
# keys dominate a cell's time: the quick set keeps them short so that all nine cells of
# the tiny model take under a minute here.
QUICK = ProbeSizes(
    name="quick",
    text_tokens=192,
    pass_key_distances=(128, 512),
    pass_keys_per_distance=2,
    trim_cases=2,
    dropped_tokens=192,
    kept_tokens=128,
)
FULL = ProbeSizes(
    name="full",
    text_tokens=None,
    pass_key_distances=(64, 256, 512, 1024, 2048),
    pass_keys_per_distance=6,
    trim_cases=8,
    dropped_tokens=512,
    kept_tokens=384,
)


@dataclass(frozen=True)
class TrimCase:
    """A conversation a trim shortens, with one fact on each side of the cut.

    Attributes:
        system_prompt: Kept by every trim.
        dropped: ``(role, content)`` turns the trim replaces by a summary; the first
            two state `dropped_fact`.
        kept: Turns the trim keeps; the first two state `kept_fact`.
        kept_question: The question about the kept fact and its reply (two turns).
        dropped_question: The same for the dropped fact (answerable only through the
            summary).
        kept_answer: The value the kept question's reply recalls.
        dropped_answer: The value the dropped question's reply recalls.
    """

    system_prompt: str
    dropped: tuple[tuple[str, str], ...]
    kept: tuple[tuple[str, str], ...]
    kept_question: tuple[dict, ...]
    dropped_question: tuple[dict, ...]
    kept_answer: str
    dropped_answer: str


@dataclass(frozen=True)
class ProbeSet:
    """Everything one check asks.

    Attributes:
        sizes: The sizes it was built with.
        texts: ``(name, text)`` pairs to score position by position.
        pass_keys: Pass-key tasks, in a fixed order.
        trim_cases: Conversations for the trim cells.
    """

    sizes: ProbeSizes
    texts: tuple[tuple[str, str], ...]
    pass_keys: tuple[RecallTask, ...]
    trim_cases: tuple[TrimCase, ...]

    @property
    def settings_key(self) -> str:
        """What decides the numbers besides the model: probe version and sizes."""
        return f"probes-v{PROBE_VERSION}:{self.sizes.name}"


def probe_texts() -> list[tuple[str, str]]:
    """The shipped texts plus the repeated passage, as ``(name, text)``."""
    folder = paths.resources_dir() / "quality"
    texts = [
        (name.removesuffix(".txt"), (folder / name).read_text(encoding="utf-8"))
        for name in TEXT_FILES
    ]
    prose = texts[0][1]
    opening = "\n\n".join(prose.split("\n\n")[:2])
    texts.append(("repeated", f"{opening}\n\n{opening}"))
    return texts


def text_filler(
    encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]
) -> recall_tasks.Filler:
    """A filler that cuts windows of the probe texts, measured in model tokens."""
    ids: list[int] = []
    for _, text in probe_texts()[:3]:
        ids.extend(encode(text + "\n\n"))

    def filler(tokens: int, rng: random.Random) -> str:
        tokens = max(tokens, 1)
        start = rng.randrange(len(ids))
        window = [ids[(start + i) % len(ids)] for i in range(tokens)]
        return decode(window).strip()

    return filler


def build_probes(
    sizes: ProbeSizes,
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    max_context: int | None = None,
) -> ProbeSet:
    """Build the probe set for one model's tokenizer.

    Args:
        sizes: `QUICK` or `FULL`.
        encode: Text → token ids (no special tokens).
        decode: Token ids → text.
        max_context: The model's trained context; pass keys that would not fit (with
            room for the question) are left out.
    """
    filler = text_filler(encode, decode)
    rng = random.Random(SEED)
    pass_keys = []
    for distance in sizes.pass_key_distances:
        if max_context is not None and distance + 128 > max_context:
            continue
        for _ in range(sizes.pass_keys_per_distance):
            pass_keys.append(recall_tasks.pass_key_task(rng, distance, filler))
    cases = [
        _trim_case(rng, filler, sizes.dropped_tokens, sizes.kept_tokens)
        for _ in range(sizes.trim_cases)
    ]
    return ProbeSet(sizes, tuple(probe_texts()), tuple(pass_keys), tuple(cases))


def _trim_case(
    rng: random.Random,
    filler: recall_tasks.Filler,
    dropped_tokens: int,
    kept_tokens: int,
) -> TrimCase:
    dropped_subject, dropped_q, dropped_value = recall_tasks.fact(rng)
    kept_subject, kept_q, kept_value = recall_tasks.fact(
        rng, exclude=(dropped_subject,)
    )

    def pairs(turns: list[dict]) -> tuple[tuple[str, str], ...]:
        return tuple((t["role"], t["content"]) for t in turns)

    dropped = recall_tasks.fact_turns(dropped_subject, dropped_value)
    dropped += recall_tasks.filler_turns(rng, filler, dropped_tokens)
    kept = recall_tasks.fact_turns(kept_subject, kept_value)
    kept += recall_tasks.filler_turns(rng, filler, kept_tokens)
    return TrimCase(
        system_prompt=SYSTEM_PROMPT,
        dropped=pairs(dropped),
        kept=pairs(kept),
        kept_question=tuple(
            recall_tasks.answer_turns(kept_subject, kept_q, kept_value)
        ),
        dropped_question=tuple(
            recall_tasks.answer_turns(dropped_subject, dropped_q, dropped_value)
        ),
        kept_answer=kept_value,
        dropped_answer=dropped_value,
    )
