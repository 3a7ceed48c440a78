"""What one measured cell says, and the thresholds that turn it into a verdict.

The four numbers, each against the full-precision reference on the same prompts:

* **top-1 agreement**: how often the most likely next token is the same. 100 % means
  greedy decoding would write the same text.
* **mean KL** (nats): how far the whole next-token distribution moved; 0 is identical.
  Sampling at temperature > 0 feels this even when the top token stays.
* **perplexity ratio**: the compressed cache's perplexity on the probe texts over the
  reference's; 1.01 is 1 % more surprised by real text.
* **pass-key recall**: of the hidden facts the reference finds, how many the compressed
  cache still finds (greedy, every answer token right).

Trim cells compare with an exact rebuild of the trimmed conversation instead, on the
answer to a question about a fact in the kept turns.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from app.core.quality.cells import Cell

OK = "ok"
NOTICEABLE = "noticeable"
FAILS = "fails"

# A cell "fails" where the cost is one a user would feel in answers: mlx-lm#1555
# measured plain 4-bit KV at +20 % perplexity on Qwen3-1.7B ("unusable"); llama.cpp
# measured q8_0 keys at +0.001 perplexity. "Noticeable" marks a measurable but small
# cost, like 4-bit KV on the reference model (top-1 ~94 %, KL ~0.01, +1 % perplexity).
FAIL_TOP1 = 0.85
FAIL_KL = 0.1
FAIL_PERPLEXITY_RATIO = 1.10
FAIL_RECALL_LOSS = 0.2
NOTICE_TOP1 = 0.97
NOTICE_KL = 0.01
NOTICE_PERPLEXITY_RATIO = 1.02
NOTICE_RECALL_LOSS = 0.1


@dataclass(frozen=True)
class CellResult:
    """The measured cost of one cell.

    Attributes:
        cell: What was measured.
        positions: Next-token predictions compared (text probes, or answer tokens for
            trims).
        top1_agreement: Share of positions whose top-1 token agrees, or None.
        mean_kl: Mean KL(reference ‖ cell) in nats, or None.
        perplexity_ratio: Cell perplexity ÷ reference perplexity on the texts, or None.
        recall_hits: Probes whose answer the cell got right.
        recall_total: Probes asked.
        reference_hits: Of the same probes, how many the reference got right.
        seconds: Wall time of this cell.
        complete: False when the check was stopped while this cell ran.
        kv_bytes_per_token: Cache bytes per token at this precision (None for trims).
        error: Why the cell could not be measured (e.g. a group that does not divide
            the head size), or None.
    """

    cell: Cell
    positions: int = 0
    top1_agreement: float | None = None
    mean_kl: float | None = None
    perplexity_ratio: float | None = None
    recall_hits: int = 0
    recall_total: int = 0
    reference_hits: int = 0
    seconds: float = 0.0
    complete: bool = True
    kv_bytes_per_token: float | None = None
    error: str | None = None

    @property
    def recall_loss(self) -> float | None:
        """Share of the reference's correct answers this cell lost (None if none)."""
        if not self.reference_hits:
            return None
        return max(self.reference_hits - self.recall_hits, 0) / self.reference_hits

    @property
    def verdict(self) -> str:
        """``ok``, ``noticeable`` or ``fails`` (see the thresholds above)."""
        return verdict(self)

    def to_dict(self) -> dict:
        """A JSON-serializable form (cell as its key, plus the verdict)."""
        data = asdict(self)
        data["cell"] = self.cell.key
        data["label"] = self.cell.label
        data["verdict"] = self.verdict if self.error is None else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> CellResult:
        """Rebuild a result from `to_dict` output (extra keys are ignored)."""
        fields = {f for f in cls.__dataclass_fields__ if f != "cell"}
        return cls(
            cell=Cell.from_key(data["cell"]),
            **{k: v for k, v in data.items() if k in fields},
        )


def verdict(result: CellResult) -> str:
    """Judge a cell by the worst of its numbers."""

    def worse(value, notice, fail, higher_is_worse=True) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return OK
        sign = 1 if higher_is_worse else -1
        if sign * value > sign * fail:
            return FAILS
        if sign * value > sign * notice:
            return NOTICEABLE
        return OK

    levels = [
        worse(result.top1_agreement, NOTICE_TOP1, FAIL_TOP1, higher_is_worse=False),
        worse(result.mean_kl, NOTICE_KL, FAIL_KL),
        worse(result.perplexity_ratio, NOTICE_PERPLEXITY_RATIO, FAIL_PERPLEXITY_RATIO),
        _recall_level(result),
    ]
    for level in (FAILS, NOTICEABLE):
        if level in levels:
            return level
    return OK


def _recall_level(result: CellResult) -> str:
    loss = result.recall_loss
    if loss is None:
        return OK
    # One probe either way is noise with a handful of probes.
    lost = result.reference_hits - result.recall_hits
    if lost <= 1:
        return OK
    if loss > FAIL_RECALL_LOSS:
        return FAILS
    if loss > NOTICE_RECALL_LOSS:
        return NOTICEABLE
    return OK


def perplexity_ratio(reference_nll: float, compressed_nll: float, positions: int):
    """exp(mean compressed NLL) ÷ exp(mean reference NLL), or None without positions."""
    if positions <= 0:
        return None
    return math.exp((compressed_nll - reference_nll) / positions)
