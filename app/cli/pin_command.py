"""`swapless pin ID` and `swapless pin --off ID`: keep a message word for word.

A pinned message stays verbatim after the summary when its turn is trimmed; a pin that
could not fit the conversation's limit is refused here, in words, when it is set.
"""

from __future__ import annotations

import argparse
import sys

from app.cli import arg_types


def register(subcommands) -> None:
    """Add the subcommand to the parser."""
    pin = subcommands.add_parser(
        "pin", help="pin a message: it stays word for word after the summary"
    )
    pin.add_argument("message", type=arg_types.row_id, metavar="ID")
    pin.add_argument("--off", action="store_true", help="unpin the message")
    pin.set_defaults(run=run_pin)


def run_pin(args: argparse.Namespace) -> int:
    """Pin or unpin one message; exit 2 with one line when it cannot be."""
    from app.cli.runtime import open_store
    from app.core.chat.pins import pin_message
    from app.core.errors import InputError
    from app.core.store import NotFoundError

    with open_store(lambda message: print(message, file=sys.stderr)) as store:
        try:
            said = pin_message(store, args.message, not args.off)
        except NotFoundError:
            print(f"swapless: there is no message {args.message}", file=sys.stderr)
            return 2
        except InputError as exc:
            print(f"swapless: {exc}", file=sys.stderr)
            return 2
    print(said)
    return 0
