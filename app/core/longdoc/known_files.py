"""Where the files of past readings were, so a stopped reading can be resumed later.

The store identifies a document by the SHA-256 of its bytes, not by a path (a file may
move, and the same file may be attached from two places). To offer Resume after a
restart or a crash, the app remembers the last path each document was read from in a
small private JSON file in the app home (`paths.known_files_path`); resuming re-reads
the file there and resumes only if its digest still matches (`resume`). Losing the file
costs only the button: attaching the file again resumes the same way.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

from app.core.files import bounded_read, paths, private_files

log = logging.getLogger(__name__)

MAX_FILES = 200
"""Paths remembered (the most recent)."""
_lock = threading.Lock()


def remember_file(sha256: str, path: str | Path) -> None:
    """Remember that the document ``sha256`` was read from ``path``."""
    with _lock:
        known = _load()
        known.pop(sha256, None)
        known[sha256] = str(path)
        kept = dict(list(known.items())[-MAX_FILES:])
        try:
            private_files.write_private_text(paths.known_files_path(), json.dumps(kept))
        except OSError as exc:
            log.warning("could not remember where %s was read from: %s", path, exc)


def known_file(sha256: str) -> Path | None:
    """The path the document ``sha256`` was last read from, or None."""
    with _lock:
        found = _load().get(sha256)
    return Path(found) if isinstance(found, str) else None


def _load() -> dict:
    try:
        data = bounded_read.read_json(
            paths.known_files_path(), what="The document-files record"
        )
    except FileNotFoundError:
        return {}
    except bounded_read.FileReadError as exc:
        log.warning("ignoring it: %s", exc)
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)}
