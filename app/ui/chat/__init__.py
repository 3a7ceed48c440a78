"""The chat itself: the message list and bubbles, rich text, the composer, and the
controllers and worker that run a turn and stream it in.

May import `app.core`, `app.ui.common`; the window wires it to the other features.
"""
