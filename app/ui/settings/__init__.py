"""The Settings dialog and the controller that applies what it changes.

May import `app.core`, `app.ui.common`.
"""
