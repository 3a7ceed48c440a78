"""Models on disk and by name: the catalog of folders and Hugging Face caches, downloads, a
model's identity (by content), and the words that describe a model's verdict.

Pure Python; may import `app.core.files` and `app.core.budget`; never MLX or Qt.
"""
