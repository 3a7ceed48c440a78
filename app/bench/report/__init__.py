"""What the benchmark writes: results.md and its plots.

May import `app.bench` and its parts' drawing helpers.
"""
