"""The engine's half of quality checks: runs the probes of `app.core.quality` through a
loaded model and scores log-probs against full precision. The numbers and words live in
`app.core.quality`; the MLX work lives here.

May import mlx, the engine, the cache package and `app.core.quality`; never Qt.
"""
