"""Presets in the window: the picker, its item painting, and the *Edit preset…* dialog.

May import `app.core.presets`, `app.ui.common`.
"""
