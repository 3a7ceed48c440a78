"""Small Qt pieces every feature uses: theme, throttling, dialogs, labels and buttons,
worker plumbing, error reporting, the main-thread garbage collector.

May import `app.core`; never another `app.ui` feature.
"""
