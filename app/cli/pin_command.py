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
    from app.core.errors import SettingsError
    from app.core.presets.presets import get_preset, preset_from_dict
    from app.core.store import NotFoundError
    from app.core.trim.pins import estimate_tokens, pin_refusal

    with open_store(lambda message: print(message, file=sys.stderr)) as store:
        try:
            message = store.get_message(args.message)
        except NotFoundError:
            print(f"swapless: there is no message {args.message}", file=sys.stderr)
            return 2
        if not args.off:
            conversation = store.get_conversation(message.conversation_id)
            try:
                preset = preset_from_dict(
                    conversation.preset or "chat", conversation.settings
                )
            except SettingsError:
                preset = get_preset("chat")
            others = sum(
                estimate_tokens(m.content, m.token_count)
                for m in store.pinned_messages(message.conversation_id)
                if m.id != message.id
            )
            refusal = pin_refusal(
                message.id,
                others,
                estimate_tokens(message.content, message.token_count),
                preset.max_context,
            )
            if refusal:
                print(f"swapless: {refusal}", file=sys.stderr)
                return 2
        try:
            store.set_pinned(message.id, not args.off)
        except ValueError as exc:
            print(f"swapless: {exc}", file=sys.stderr)
            return 2
    if args.off:
        print(f"Message {message.id} is no longer pinned.")
    elif message.trimmed:
        print(
            f"Pinned message {message.id}: it was summarised, and from the next turn "
            "it is sent word for word after the summary."
        )
    else:
        print(
            f"Pinned message {message.id}: when it is trimmed it stays word for word "
            "after the summary."
        )
    return 0
