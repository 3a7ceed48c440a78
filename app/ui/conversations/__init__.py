"""The list of conversations: search, open, rename, delete.

May import `app.core.store`, `app.ui.common`.
"""
