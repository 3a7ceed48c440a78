"""The local server's switch in the window: starts and stops `app.server` and shows its
state.

May import `app.server`, `app.ui.common`.
"""
