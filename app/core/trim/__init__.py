"""Auto-trim: when to trim a conversation, what to keep, and how to summarise the rest.

Pure Python: it takes token counts and texts, never a model, so every rule is tested
without MLX. The chat session applies the plans with the engine and the store.
"""
