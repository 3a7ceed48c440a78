"""The one way Swapless reads a file it did not just write: checked, bounded, in words.

Settings, presets, a model's ``config.json``, the measured speeds and the remembered
document files are all small files that a person (or another program) can replace
with anything: a named pipe that blocks every command, a link to ``/dev/zero`` that
reads until memory runs out, JSON or TOML nested deeply enough to exhaust Python's
recursion, numbers with thousands of digits. Every such file goes through here:

* only a regular file is read (opened without blocking, then checked on the open
  descriptor, so a link swapped in between cannot fool the check);
* at most ``max_bytes`` are read;
* the text must be UTF-8, and JSON/TOML may nest at most ``max_depth`` deep;
* every failure is one `FileReadError` naming the file and the fault.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tomllib
from itertools import accumulate
from pathlib import Path
from typing import Any

from app.core.errors import InputError

DEFAULT_MAX_BYTES = 4 * 2**20
"""Far above any settings, preset or model configuration file."""
DEFAULT_MAX_DEPTH = 64
"""Real files nest a handful of levels; Python's parsers recurse once per level."""

_KINDS = {
    stat.S_IFDIR: "a folder",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a named pipe",
    stat.S_IFSOCK: "a socket",
}
# What may contain brackets without nesting anything: strings and comments.
JSON_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_TOML_STRINGS = re.compile(
    r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*'
)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


class FileReadError(InputError):
    """A file cannot be used: missing, not a regular file, too large, or malformed."""


def read_bytes(path: Path, *, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """Return the bytes of the regular file ``path``, at most ``max_bytes`` of them.

    Args:
        path: The file.
        what: What the file is, for the message ("The settings file").
        max_bytes: Larger files are refused.

    Raises:
        FileNotFoundError: ``path`` does not exist (callers often use a default).
        FileReadError: It is not a regular file, is too large or cannot be read.
    """
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise FileReadError(
            f"{what} {path} cannot be read: {exc.strerror or exc}."
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            link = f" (a link to {os.path.realpath(path)})" if path.is_symlink() else ""
            raise FileReadError(
                f"{what} {path}{link} is {kind}, not a file; replace it with a file "
                "or remove it."
            )
        if info.st_size > max_bytes:
            raise FileReadError(_too_large(what, path, max_bytes))
        chunks, total = [], 0
        while total <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:  # it grew while we read
            raise FileReadError(_too_large(what, path, max_bytes))
        return b"".join(chunks)
    except OSError as exc:
        raise FileReadError(
            f"{what} {path} cannot be read: {exc.strerror or exc}."
        ) from exc
    finally:
        os.close(fd)


def read_text(path: Path, *, what: str, max_bytes: int = DEFAULT_MAX_BYTES) -> str:
    """Return the UTF-8 text of ``path`` (see `read_bytes`).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FileReadError: As `read_bytes`, or the text is not UTF-8 (the message names
            the first bad byte and where it is).
    """
    data = read_bytes(path, what=what, max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise FileReadError(
            f"{what} {path} is not UTF-8 text: byte 0x{data[exc.start]:02x} at line "
            f"{line} (offset {exc.start})."
        ) from None


def read_json(
    path: Path,
    *,
    what: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Any:
    """Return the parsed JSON of ``path``: standard JSON only, nested at most ``max_depth``.

    ``NaN`` and ``Infinity`` are refused (they are not JSON, and what reads them
    later would write non-standard JSON back), as are integers too long to convert.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FileReadError: As `read_text`, or the JSON is malformed or too deep.
    """
    text = read_text(path, what=what, max_bytes=max_bytes)
    return parse_json(text, where=f"{what} {path}", max_depth=max_depth)


def parse_json(text: str, *, where: str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse JSON ``text`` with the checks of `read_json`; ``where`` names its source.

    Raises:
        FileReadError: The JSON is malformed, too deep, or holds NaN, Infinity or an
            integer too long to convert.
    """
    depth = nesting_depth(JSON_STRINGS.sub("", text))
    if depth > max_depth:
        raise FileReadError(_too_deep(where, depth, max_depth))
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except _NotStandard as exc:
        raise FileReadError(f"{where} holds {exc}, which is not JSON.") from None
    except json.JSONDecodeError as exc:
        raise FileReadError(
            f"{where} is not valid JSON: {exc.msg} at line {exc.lineno}, column "
            f"{exc.colno}."
        ) from None
    except (ValueError, RecursionError) as exc:  # an integer too long to convert
        raise FileReadError(f"{where} is not usable JSON: {exc}.") from None


def read_toml(
    path: Path,
    *,
    what: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> dict[str, Any]:
    """Return the parsed TOML of ``path``, nested at most ``max_depth`` deep.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        FileReadError: As `read_text`, or the TOML is malformed or too deep.
    """
    text = read_text(path, what=what, max_bytes=max_bytes)
    depth = nesting_depth(_TOML_STRINGS.sub("", text))
    if depth > max_depth:
        raise FileReadError(_too_deep(f"{what} {path}", depth, max_depth))
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise FileReadError(f"{what} {path} is not valid TOML: {exc}.") from None
    except (ValueError, RecursionError) as exc:
        raise FileReadError(f"{what} {path} is not usable TOML: {exc}.") from None


def nesting_depth(text: str) -> int:
    """Return how deeply brackets and braces nest in ``text`` (strings removed first)."""
    brackets = _NOT_BRACKETS.sub("", text)
    if len(brackets) < 2:
        return len(brackets)
    return max(accumulate(1 if c in "[{" else -1 for c in brackets))


def finite_number(value: Any) -> bool:
    """Whether ``value`` is an int or a finite float (never a bool)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


class _NotStandard(ValueError):
    pass


def _refuse_constant(name: str) -> Any:
    raise _NotStandard(name)


def _too_large(what: str, path: Path, max_bytes: int) -> str:
    return (
        f"{what} {path} is larger than {max_bytes / 2**20:g} MiB, far more than such "
        "a file needs; replace it or remove it."
    )


def _too_deep(where: str, depth: int, max_depth: int) -> str:
    return (
        f"{where} nests {depth} levels deep; at most {max_depth} are read. Replace "
        "it or remove it."
    )
