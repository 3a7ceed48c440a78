"""Running a conversation: what is sent to the model, trimming, saving, reporting.

Qt-free and MLX-free: it drives the engine through its thread-safe API, so the CLI and
the desktop app share one implementation of a chat turn.
"""
