"""Argument types that refuse a bad number in one line, before anything is loaded.

argparse turns the `argparse.ArgumentTypeError` these raise into
``swapless: error: argument --seed: ...`` and exit code 2. Checking here, not later,
means a bad ``--seed`` is refused before a model takes seconds to load, and a value
SQLite or MLX cannot take (a negative seed, an id past 64 bits) never reaches them.
"""

from __future__ import annotations

import argparse
import math

from app.core.presets.generation_settings import MAX_SEED
from app.core.text.unicode_text import invalid_text

MAX_ID = 2**63 - 1
"""SQLite row ids are signed 64-bit integers."""


def _whole_number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a whole number, got {text!r}"
        ) from None


def seed(text: str) -> int:
    """A sampling seed: 0 to 2**64 - 1."""
    value = _whole_number(text)
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(
            f"a seed must be between 0 and {MAX_SEED}, got {value}"
        )
    return value


def row_id(text: str) -> int:
    """A conversation id: 1 to 2**63 - 1."""
    value = _whole_number(text)
    if not 1 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(
            f"an id must be a whole number of at least 1, got {value}"
        )
    return value


def count(text: str) -> int:
    """A number of items to show: 0 or more (below 2**63)."""
    value = _whole_number(text)
    if not 0 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"expected 0 or more, got {value}")
    return value


MAX_SOAK_SECONDS = 7 * 24 * 3600.0
"""A week: longer than any soak run anyone waits for."""


def seconds(text: str) -> float:
    """A duration: a finite number of seconds above 0 (a week at most)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds, got {text!r}"
        ) from None
    if not math.isfinite(value) or not 0 < value <= MAX_SOAK_SECONDS:
        raise argparse.ArgumentTypeError(
            f"expected seconds above 0 and at most {MAX_SOAK_SECONDS:g}, got {text}"
        )
    return value


def text(value: str) -> str:
    """Free text (a question, a system prompt, a search): it must be valid UTF-8."""
    fault = invalid_text(value)
    if fault is not None:
        raise argparse.ArgumentTypeError(f"not UTF-8 text: {fault}")
    return value


def positive(text: str) -> int:
    """A number of tokens that must be at least 1 (below 2**63)."""
    value = _whole_number(text)
    if not 1 <= value <= MAX_ID:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value
