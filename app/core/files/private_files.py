"""Keep the user's conversations private from other accounts on the same machine.

The home holds every message, the prompts' token ids (in the prefix cache), settings and
logs. Folders Swapless creates are ``0700`` and files ``0600``, whatever the umask;
a home left readable by an older version is tightened the first time it is used, with a
log line saying what changed. Only the permission bits are touched, never the content.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from app.core.files import partial_files

logger = logging.getLogger(__name__)

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OTHERS = stat.S_IRWXG | stat.S_IRWXO

# Weights are not private and a models folder can hold many thousands of files: only
# the folder itself is tightened (which already hides what is inside).
_NOT_WALKED = frozenset({"models"})


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) if needed; every folder created is 0700.

    Each missing level is created on its own: ``mkdir(parents=True)`` would give the
    parents the umask's mode (``models/`` was 0755 after ``make-model`` made
    ``models/NAME``).

    Returns:
        ``path``.

    Raises:
        OSError: It cannot be created.
    """
    if path.is_dir():
        return path
    missing = []
    level = path
    while not level.is_dir() and level != level.parent:
        missing.append(level)
        level = level.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            if not folder.is_dir():
                raise
            continue  # made by another process meanwhile: its mode is its own
        os.chmod(folder, PRIVATE_DIR_MODE)  # mkdir's mode is filtered by the umask
    return path


def create_private_file(path: Path) -> bool:
    """Create an empty file readable only by this user, unless it exists.

    Returns:
        True if the file was created now.

    Raises:
        OSError: It cannot be created.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    os.close(fd)
    os.chmod(path, PRIVATE_FILE_MODE)
    return True


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable only by this user.

    A temporary file next to it is written and renamed over it, so a crash never
    leaves half a file (and the next start removes the temporary one).

    Raises:
        OSError: It cannot be written.
    """
    temporary = partial_files.partial_path(path)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            os.fchmod(handle.fileno(), PRIVATE_FILE_MODE)  # an older file's mode
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def make_private(path: Path) -> bool:
    """Remove group and other permissions from one file or folder we own.

    Symbolic links are left alone (their target may be anyone's).

    Returns:
        True if the permissions changed.
    """
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(info.st_mode) or not info.st_mode & _OTHERS:
        return False
    if info.st_uid != os.getuid():
        return False  # not ours to change (e.g. a folder shared on purpose)
    if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX:
        return False  # a shared scratch folder such as /tmp, never ours alone
    mode = PRIVATE_DIR_MODE if stat.S_ISDIR(info.st_mode) else PRIVATE_FILE_MODE
    try:
        os.chmod(path, mode)
    except OSError:
        return False
    return True


def tighten_home(home: Path) -> int:
    """Make an existing home and what Swapless keeps in it private.

    Logs one warning naming the home when anything had to change.

    Returns:
        How many files and folders were tightened.
    """
    changed = int(make_private(home))
    try:
        entries = list(home.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        changed += make_private(entry)
        if entry.name in _NOT_WALKED or entry.is_symlink() or not entry.is_dir():
            continue
        for root, folders, files in os.walk(entry):
            for name in folders + files:
                changed += make_private(Path(root) / name)
    if changed:
        logger.warning(
            "Swapless made %d file(s) and folder(s) in %s readable only by you "
            "(they were readable by other users of this computer).",
            changed,
            home,
        )
    return changed
