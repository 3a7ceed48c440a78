"""The only package that imports MLX and mlx-lm.

It loads models, owns the per-conversation prompt caches, generates on one long-lived
thread and builds local models. Everything it reports travels as frozen dataclasses.
"""
