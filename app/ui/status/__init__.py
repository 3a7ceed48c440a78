"""What the window says about memory and context: the memory-pressure gauge and its
sampler, the context meter, notices, toasts and the status area.

May import `app.core`, `app.ui.common`.
"""
