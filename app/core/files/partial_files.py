"""Files written under a temporary name and renamed into place, named after their writer.

A write that dies half-way (a full disk, a kill) must not leave a file that looks
complete, so large files are written under a temporary name first. On a full disk the
partial file is the problem itself: it holds the space every later command needs. Its
name records which process writes it (host, process id and start time), so any later
start can delete what a dead writer left, at once and without touching a file another
running process is still writing.
"""

from __future__ import annotations

import hashlib
import logging
import re
from pathlib import Path

from app.core.files import process_identity
from app.core.files.process_identity import ProcessIdentity

logger = logging.getLogger(__name__)

MARK = ".partial-"
_NAME = re.compile(r"\.partial-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<start>\d+)(\.|$)")


def _host_tag(host: str) -> str:
    return hashlib.sha256(host.encode()).hexdigest()[:8]


def partial_path(final: Path) -> Path:
    """Return the temporary name this process writes ``final`` under.

    The suffix is kept (``x.safetensors`` → ``x.partial-…-….safetensors``): some
    writers, such as MLX's, append their own suffix to a name without it.
    """
    me = process_identity.current()
    tag = f"{MARK}{_host_tag(me.host)}-{me.pid}-{round(me.started_at * 1000)}"
    return final.with_name(f"{final.stem}{tag}{final.suffix}")


def is_partial(path: Path) -> bool:
    """Return whether ``path`` is a temporary file of `partial_path`."""
    return MARK in path.name


def _writer_is_running(path: Path) -> bool:
    match = _NAME.search(path.name)
    if match is None:
        return False  # not ours, or damaged: nothing can still be writing it
    me = process_identity.current()
    if match["host"] != _host_tag(me.host):
        return True  # another machine sharing this folder: its own start decides
    writer = ProcessIdentity(
        host=me.host, pid=int(match["pid"]), started_at=int(match["start"]) / 1000
    )
    return process_identity.is_running(writer)


def remove_stale(folder: Path, legacy_pattern: str | None = None) -> int:
    """Delete the partial files in ``folder`` whose writer is no longer running.

    Args:
        folder: Where to look (not recursively); a missing folder is fine.
        legacy_pattern: A glob for temporary files of older versions, whose names do
            not say who writes them; they are deleted too.

    Returns:
        The number of files deleted.
    """
    if not folder.is_dir():
        return 0
    candidates = [p for p in folder.iterdir() if is_partial(p)]
    if legacy_pattern:
        candidates += [p for p in folder.glob(legacy_pattern) if not is_partial(p)]
    removed = 0
    for path in candidates:
        if not path.is_file() or (is_partial(path) and _writer_is_running(path)):
            continue
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        removed += 1
        logger.info("removed %s (%d bytes) left by an unfinished write", path, size)
    return removed
