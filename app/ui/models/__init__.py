"""Models in the window: the welcome view, the model picker and manager dialog, and quality
checks with their panel.

May import `app.core`, `app.ui.common`.
"""
