"""`swapless conversations`, `export`, `import` and `search`: the store from a terminal."""

from __future__ import annotations

import argparse
import json
import stat
import sys
from pathlib import Path

from app.cli import arg_types
from app.core.store.exchange.json_import import IMPORTED_TITLE_SUFFIX


def register(subcommands) -> None:
    """Add the subcommands to the parser."""
    listing = subcommands.add_parser("conversations", help="list stored conversations")
    listing.add_argument("--json", action="store_true", help="one JSON array")
    listing.add_argument("--limit", type=arg_types.count, default=None, metavar="N")
    listing.set_defaults(run=run_list)

    export = subcommands.add_parser(
        "export", help="print a conversation as Markdown or JSON"
    )
    export.add_argument("conversation", type=arg_types.row_id, metavar="ID")
    export.add_argument("--format", choices=("md", "json"), default="md")
    export.set_defaults(run=run_export)

    importer = subcommands.add_parser(
        "import",
        help="import a conversation exported as JSON, or every readable "
        "conversation of a database file (one set aside after damage)",
    )
    importer.add_argument(
        "file",
        metavar="FILE",
        help="a JSON export ('-' reads stdin) or a Swapless database file",
    )
    importer.set_defaults(run=run_import)

    search = subcommands.add_parser("search", help="search every message and title")
    search.add_argument("text", type=arg_types.text, metavar="TEXT")
    search.add_argument("--limit", type=arg_types.count, default=20, metavar="N")
    search.add_argument("--json", action="store_true", help="one JSON array")
    search.set_defaults(run=run_search)


def _open(*, read_only_ok: bool = False):
    from app.cli.runtime import open_store

    return open_store(
        lambda message: print(message, file=sys.stderr), read_only_ok=read_only_ok
    )


def run_list(args: argparse.Namespace) -> int:
    """List conversations, most recently updated first."""
    with _open(read_only_ok=True) as store:
        conversations = store.list_conversations(limit=args.limit)
        rows = [
            {
                "id": c.id,
                "title": c.title,
                "updated_at": c.updated_at.isoformat(),
                "model": c.model,
                "preset": c.preset,
                "messages": len(store.messages(c.id, include_trimmed=True)),
            }
            for c in conversations
        ]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False, indent=2))
        return 0
    if not rows:
        print("No conversations yet.", file=sys.stderr)
        return 0
    for line in _table(rows):
        print(line)
    return 0


def _table(rows: list[dict]) -> list[str]:
    """The conversations as aligned columns under a header (widths fit the data)."""
    header = ("ID", "UPDATED", "MESSAGES", "PRESET", "TITLE")
    cells = [
        (
            str(row["id"]),
            row["updated_at"][:16].replace("T", " "),
            str(row["messages"]),
            row["preset"] or "-",
            " ".join((row["title"] or "(untitled)").split()),
        )
        for row in rows
    ]
    widths = [max(len(r[i]) for r in [header, *cells]) for i in range(4)]
    lines = []
    for cell in [header, *cells]:
        lines.append(
            f"{cell[0]:>{widths[0]}}  {cell[1]:<{widths[1]}}  {cell[2]:>{widths[2]}}  "
            f"{cell[3]:<{widths[3]}}  {cell[4]}"
        )
    return lines


def run_export(args: argparse.Namespace) -> int:
    """Print one conversation."""
    with _open(read_only_ok=True) as store:
        if args.format == "json":
            print(
                json.dumps(
                    store.export_json(args.conversation), ensure_ascii=False, indent=2
                )
            )
        else:
            print(store.export_markdown(args.conversation))
    return 0


MAX_IMPORT_BYTES = 256 * 2**20
"""Largest export read: far above any real conversation, far below what would strain
memory (the JSON is parsed whole)."""


SQLITE_HEADER = b"SQLite format 3\x00"


def run_import(args: argparse.Namespace) -> int:
    """Import a JSON export (or a set-aside database file) as new conversations.

    The id alone on stdout keeps ``ID=$(swapless import FILE)`` working; the sentence
    on stderr tells a person what was imported and how to open it.
    """
    if args.file != "-" and _is_database(Path(args.file)):
        return _import_database(Path(args.file))
    data = _read_export(args.file)
    with _open() as store:
        result = store.import_conversation(data, title_suffix=IMPORTED_TITLE_SUFFIX)
    for note in result.notes:
        print(f"swapless: note: {note}", file=sys.stderr)
    print(
        f"Imported “{result.title}” ({result.messages} messages) as conversation "
        f"{result.conversation_id}; continue it with "
        f"`swapless chat --conversation {result.conversation_id}`.",
        file=sys.stderr,
    )
    print(result.conversation_id)
    return 0


def _is_database(path: Path) -> bool:
    """Whether ``path`` is a regular file that starts like an SQLite database."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return False
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False  # _read_export says what is wrong


def _import_database(path: Path) -> int:
    """Import every readable conversation of a database file; print the new ids."""
    with _open() as store:
        ids, report = store.import_database(path)
    if not report.complete:
        print(f"swapless: note: from {path}: {report.describe()}", file=sys.stderr)
    for conversation_id in ids:
        print(conversation_id)
    return 0


def _read_export(name: str) -> bytes:
    """Read an export file ('-' for stdin), refusing anything but a sane regular file.

    Raises:
        InputError: The file is missing, unreadable, not a regular file (a folder,
            ``/dev/zero``, a FIFO) or too large.
    """
    from app.core.errors import InputError

    if name == "-":
        data = sys.stdin.buffer.read(MAX_IMPORT_BYTES + 1)
    else:
        path = Path(name)
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                raise InputError(f"{path} is not a regular file; give a JSON export.")
            if info.st_size > MAX_IMPORT_BYTES:
                raise InputError(
                    f"{path} is {info.st_size / 2**20:,.0f} MiB; exports up to "
                    f"{MAX_IMPORT_BYTES // 2**20} MiB can be imported."
                )
            data = path.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{path} does not exist.") from None
        except OSError as exc:
            raise InputError(f"{path} cannot be read: {exc.strerror or exc}.") from exc
    if len(data) > MAX_IMPORT_BYTES:
        raise InputError(
            f"The export is larger than {MAX_IMPORT_BYTES // 2**20} MiB; it cannot be "
            "imported."
        )
    return data


def run_search(args: argparse.Namespace) -> int:
    """Search messages and titles."""
    with _open(read_only_ok=True) as store:
        hits = store.search(args.text, limit=args.limit)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "conversation_id": h.conversation_id,
                        "title": h.conversation_title,
                        "message_id": h.message_id,
                        "role": h.role,
                        "snippet": h.snippet,
                    }
                    for h in hits
                ],
                ensure_ascii=False,
                indent=2,
            )
        )
        return 0
    if not hits:
        print(f"Nothing matches {args.text!r}.", file=sys.stderr)
    for hit in hits:
        where = f"{hit.role} message {hit.message_id}" if hit.message_id else "title"
        print(
            f"[{hit.conversation_id}] {hit.conversation_title or '(untitled)'} — {where}"
        )
        print(f"    {hit.snippet}")
    return 0
