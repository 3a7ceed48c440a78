"""Matplotlib on a headless machine: the one place the bench imports pyplot.

Every plot (the report's and the parts' own) starts here, so the backend is chosen once
(Agg: no display needed) and a missing matplotlib fails where it is asked for.
"""

from __future__ import annotations


def pyplot():
    """Return `matplotlib.pyplot` with the Agg backend selected."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
