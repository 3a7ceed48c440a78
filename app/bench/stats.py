"""Medians and spreads of repeated measurements, and ratios of interleaved pairs.

Pure Python: a figure is a list of samples; a summary is a small JSON-ready dict.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Sequence

BOOTSTRAP_RESAMPLES = 2000
MIN_SAMPLES_FOR_CI = 8


def quantile(values: Sequence[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) with linear interpolation between samples."""
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(samples: Sequence[float]) -> dict:
    """Return median, min, max, quartiles, count and the samples themselves.

    Args:
        samples: Repeated measurements of one figure.

    Raises:
        ValueError: If there are no samples.
    """
    if not samples:
        raise ValueError("no samples to summarize")
    values = [float(s) for s in samples]
    summary = {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "q1": quantile(values, 0.25),
        "q3": quantile(values, 0.75),
        "n": len(values),
        "samples": values,
    }
    if len(values) >= MIN_SAMPLES_FOR_CI:
        summary["median_ci95"] = median_ci95(values)
    return summary


def median_ci95(values: Sequence[float], seed: int = 0) -> list[float]:
    """Return a 95 % bootstrap confidence interval of the median (percentile method).

    Deterministic for a given seed, so a results file can be checked by re-running it.
    """
    rng = random.Random(seed)
    n = len(values)
    medians = sorted(
        statistics.median(rng.choices(values, k=n)) for _ in range(BOOTSTRAP_RESAMPLES)
    )
    return [quantile(medians, 0.025), quantile(medians, 0.975)]


def pair_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list:
    """Return ``a / b`` for each interleaved pair (A then B of the same repetition).

    Raises:
        ValueError: If the lists differ in length or a denominator is zero.
    """
    if len(numerators) != len(denominators):
        raise ValueError(
            f"{len(numerators)} numerators but {len(denominators)} denominators"
        )
    if any(b == 0 for b in denominators):
        raise ValueError("a denominator is zero")
    return [a / b for a, b in zip(numerators, denominators, strict=True)]


def spread_text(summary: dict, digits: int = 2) -> str:
    """Return the spread of a summary for tables: IQR, range and the median's 95 % CI.

    Fewer than five samples get the range only.
    """
    span = f"{summary['min']:.{digits}f}–{summary['max']:.{digits}f}"
    if summary["n"] < 5:
        return f"range {span} (n={summary['n']})"
    text = (
        f"IQR {summary['q1']:.{digits}f}–{summary['q3']:.{digits}f}, "
        f"range {span} (n={summary['n']})"
    )
    if "median_ci95" in summary:
        low, high = summary["median_ci95"]
        text += f"; median 95% CI {low:.{digits}f}–{high:.{digits}f}"
    return text
