"""Entry script of the packaged app: the same `main` as the `swapless` console script.

PyInstaller freezes this file as ``__main__``. Without arguments the app opens its
window (a double-click); ``--smoke-test`` and the subcommands work as in a checkout.
"""

import multiprocessing
import sys

from app.cli.main import main

if __name__ == "__main__":
    # A frozen app that ever starts a spawn-mode worker must answer it here.
    multiprocessing.freeze_support()
    sys.exit(main())
