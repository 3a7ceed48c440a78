"""The conversation's KV cache and everything that keeps it: layer kinds (full, sliding,
recurrent), quantized and aged precision, the splice that drops the oldest tokens
without a re-prefill, checkpoints, the registry of idle caches, and the prefix cache in
memory and on disk.

May import mlx/mlx-lm, `app.core.budget`, `app.core.presets` and the engine's `events`;
never Qt, the UI, the server or the store.
"""
