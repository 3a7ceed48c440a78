"""What decides the reference model's weights: the recipes of every training stage.

The recall stages (`TrainingRecipe`, run by `training.train`), the format stage and
the tool stage's phases (`FormatRecipe`, run by `training.train_format`). Each recipe
is recorded in the trained folder's ``config.json``; docs/reference-model.md says what
each was measured to do.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from app.core.modelkit.reference import corpus, tool_heads


@dataclass(frozen=True)
class Stage:
    """A stretch of training at one sequence length.

    Attributes:
        steps: Optimizer steps.
        batch: Sequences per step.
        length: Tokens per sequence (inputs; targets are shifted by one).
        max_distance: Longest filler gap of the recall tasks in this stage.
    """

    steps: int
    batch: int
    length: int
    max_distance: int


@dataclass(frozen=True)
class TrainingRecipe:
    """Everything that decides the trained weights.

    Attributes:
        seed: Seed of the circuit's random parts and of the data.
        stages: The stages, in order.
        peak_learning_rate: After warm-up.
        warmup_steps: Linear warm-up from 0.
        final_learning_rate: Where the cosine ends.
        weight_decay: AdamW's decoupled weight decay.
        clip_norm: Global gradient norm bound.
        protect_circuit: Keep the hand-built circuit and what it reads unchanged
            (`circuit.protect`); everything else trains.
    """

    seed: int = 0
    stages: tuple[Stage, ...] = (
        Stage(steps=400, batch=8, length=512, max_distance=400),
        Stage(steps=80, batch=4, length=1280, max_distance=1100),
    )
    peak_learning_rate: float = 1.5e-3
    warmup_steps: int = 40
    final_learning_rate: float = 1e-4
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    protect_circuit: bool = True

    @property
    def total_steps(self) -> int:
        """Optimizer steps over all stages."""
        return sum(stage.steps for stage in self.stages)

    @property
    def total_tokens(self) -> int:
        """Training tokens over all stages."""
        return sum(s.steps * s.batch * s.length for s in self.stages)

    def as_dict(self) -> dict:
        """A JSON-serializable description (recorded in ``config.json``)."""
        return {
            "seed": self.seed,
            "stages": [vars(stage) for stage in self.stages],
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "final_learning_rate": self.final_learning_rate,
            "weight_decay": self.weight_decay,
            "clip_norm": self.clip_norm,
            "protect_circuit": self.protect_circuit,
            "optimizer": "AdamW(0.9, 0.95)",
        }


DEFAULT_RECIPE = TrainingRecipe()


@dataclass(frozen=True)
class FormatRecipe:
    """The format stage: thinking and tool calls, trained on top of the recall model.

    It starts from the recall stages' weights as saved (rounded to float16, so the
    committed weights and a from-scratch run start it from the same numbers), adds
    the format tokens (`chat_format.FORMAT_TOKENS`) to the embedding and trains on
    `corpus.format_training_sequences`. Layers 0 and 1 (the copy circuit and what
    feeds it) are frozen and not back-propagated through, which also makes a step
    about a third cheaper: the stage had to fit in under an hour of a shared CPU.
    The loss weighs the replies fully and the prompts a tenth
    (`corpus.PROMPT_WEIGHT`); the learning rate decays on a cosine after warm-up (a
    constant rate made the first run's later checkpoints wander rather than settle).

    Attributes:
        seed: Seed of the new token rows and of the data.
        steps: Optimizer steps.
        batch: Sequences per step.
        length: Tokens per sequence.
        max_distance: Longest filler gap of the recall tasks.
        learning_rate: After warm-up.
        warmup_steps: Linear warm-up from 0.
        final_learning_rate: Where the cosine ends.
        mix: The sequence mix (`corpus.FORMAT_MIX`).
        tool_emphasis: Loss weight of the tokens a tool reply must copy
            (`corpus.emphasize`).
        tool_heads: Train layer 1's tool heads (`circuit.write_tool_heads`): their
            queries and outputs learn, the rest of layers 0–1 stays frozen, and the
            gradient reaches layer 1 (a step costs more).
        exact_tool_heads: Write layer 1's tool heads on keys of their own
            (`tool_heads.write_exact_tool_heads`); only their outputs train (the
            gradient reaches layer 1), the rest of layers 0–1 stays frozen, and so
            do the embedding rows their detectors read.
        oldest_match_weight: With ``exact_tool_heads``, what the copy heads' match
            on the token two back weighs (`tool_heads.weight_oldest_match`; 1 keeps
            the circuit as built).
    """

    seed: int = 0
    steps: int = 400
    batch: int = 8
    length: int = 384
    max_distance: int = 300
    learning_rate: float = 1e-3
    warmup_steps: int = 10
    final_learning_rate: float = 5e-5
    mix: tuple[tuple[str, float], ...] = corpus.FORMAT_MIX
    tool_emphasis: float = 1.0
    tool_heads: bool = False
    exact_tool_heads: bool = False
    oldest_match_weight: float = 1.0

    @property
    def total_tokens(self) -> int:
        """Training tokens of the stage."""
        return self.steps * self.batch * self.length

    def as_dict(self) -> dict:
        """A JSON-serializable description (recorded in ``config.json``)."""
        return {
            **vars(self),
            "optimizer": "AdamW(0.9, 0.95), wd 0.01, clip 1.0",
            "trained": "layers 2-3, final norm, tied embedding (output side)",
        }


DEFAULT_FORMAT_RECIPE = FormatRecipe()

# The tool stage, two phases on top of the format stage (docs/reference-model.md):
# first the copied tokens weigh five times (run 240 steps, stopped at 160 when the
# value was still 0 % right), then layer 1's tool heads are written and trained with
# them; the committed weights are that phase's step-80 checkpoint (the later ones
# wrote worse calls: measured, not assumed).
TOOL_EMPHASIS_RECIPE = FormatRecipe(
    seed=2,
    steps=240,
    learning_rate=6e-4,
    warmup_steps=5,
    final_learning_rate=3e-5,
    mix=corpus.TOOL_STAGE_MIX,
    tool_emphasis=5.0,
)
TOOL_HEADS_RECIPE = FormatRecipe(
    seed=3,
    steps=200,
    learning_rate=5e-4,
    warmup_steps=5,
    final_learning_rate=3e-5,
    mix=corpus.TOOL_STAGE_MIX,
    tool_emphasis=5.0,
    tool_heads=True,
)


# The exact tool heads (docs/reference-model.md, "Exact tool heads" and "A value the
# model copies"): written by hand on the tool stage's weights, the copy heads' oldest
# match weighed half, then 200 steps for layers 2-3 to re-adapt around them. The
# committed weights are this recipe's as run (2026-12-03).
TOOL_EXACT_HEADS_RECIPE = dataclasses.replace(
    TOOL_HEADS_RECIPE,
    seed=4,
    steps=200,
    # Twice as long, half as many: a conversation with five tools is ~700 tokens,
    # and one longer than a sequence is skipped (at 384, three in four were).
    batch=4,
    length=768,
    tool_heads=False,
    exact_tool_heads=True,
    oldest_match_weight=tool_heads.OLDEST_MATCH_WEIGHT,
)
