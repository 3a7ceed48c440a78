"""Conversations in and out of the store: JSON export and import (validated, never trusted)
and Markdown export.

May import the rest of `app.core.store`; never Qt or MLX.
"""
