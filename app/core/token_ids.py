"""Small operations on token id lists shared by the engine, trimming and benchmarks."""

from __future__ import annotations


def common_prefix_length(a: list[int], b: list[int]) -> int:
    """Return how many leading ids two token lists share."""
    limit = min(len(a), len(b))
    for index in range(limit):
        if a[index] != b[index]:
            return index
    return limit
