"""Tools that run the real window to check it: the soak run, the frozen app's smoke test,
screenshots, paint checks and the UI-responsiveness measurement.

May import any of `app.ui` and `app.core`; product code never imports these.
"""
