"""The `swapless` command: `main.py` parses the command line and hands each subcommand
to its own `*_command.py` module (imported only when that subcommand runs, so a quick
command stays quick), with the BLAS preload and the shared runtime set up here.

May import all of `app.core` and `app.server`; the window (`app.ui`) only when the
command starts it, and the bench only from `bench_command.py`.
"""
