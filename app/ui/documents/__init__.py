"""Long-document reading in the window: the plan card, drops onto the window, stored
readings, and the worker that runs a reading.

May import `app.core.longdoc`, `app.ui.common`, `app.ui.chat`.
"""
