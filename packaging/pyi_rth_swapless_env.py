"""PyInstaller runtime hook: child processes get the user's environment, not ours.

On Linux the bootloader starts the app with ``LD_LIBRARY_PATH`` pointing at the
bundle's ``_internal`` folder (keeping any earlier value in ``LD_LIBRARY_PATH_ORIG``).
This process needs that only at start-up (the loader reads it once), but every child
inherits it: ``g++`` run by MLX to compile CPU kernels, ``xdg-open`` run by Qt to open
a link. They would then load the bundle's libstdc++/glib/... instead of their own and
may fail on a newer distribution. So the variable is put back as the user had it.

The app re-executes itself once to preload OpenBLAS (``app/cli/blas/preload.py``); with the
bundle's variables gone from the environment that child must set up as a new
instance, which ``PYINSTALLER_RESET_ENVIRONMENT`` tells the bootloader.
"""

import os
import sys

if sys.platform.startswith("linux"):
    _original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if _original is None:
        os.environ.pop("LD_LIBRARY_PATH", None)
    else:
        os.environ["LD_LIBRARY_PATH"] = _original

os.environ["PYINSTALLER_RESET_ENVIRONMENT"] = "1"
