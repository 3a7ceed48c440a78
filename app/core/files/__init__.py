"""Files and folders of the app home: every path (`paths.py`, one environment variable
moves the home), private files (0600/0700), partial files that a dead writer left, and
which process wrote what, and the one bounded reader of small files (`bounded_read`).

Standard library, platformdirs/psutil and `app.core.errors` only; every other package may import these.
"""
