"""`Store`: the one object the CLI and the UI use to keep conversations.

The facade joins the subject mixins (conversations, messages, summaries, documents,
search, export, import) and owns the life cycle: `Store.open` checks, migrates and
recovers the database before anyone reads from it.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType

from sqlite_utils import Database

from app.core.errors import InputError, StoreError
from app.core.files import paths
from app.core.store.calls.tool_calls import ToolCallsMixin
from app.core.store.conversations import ConversationsMixin
from app.core.store.database import open_database, open_read_only_database
from app.core.store.documents import DocumentsMixin
from app.core.store.exchange.export import ExportMixin
from app.core.store.exchange.json_import import ImportMixin
from app.core.store.messages import MessagesMixin
from app.core.store.migrations import schema_version
from app.core.store.quality_results import QualityResultsMixin
from app.core.store.records import utc_now
from app.core.store.salvage import SalvageReport, copy_readable_rows
from app.core.store.search import SearchMixin
from app.core.store.summaries import SummariesMixin


class Store(
    ConversationsMixin,
    MessagesMixin,
    SummariesMixin,
    DocumentsMixin,
    SearchMixin,
    ExportMixin,
    ImportMixin,
    QualityResultsMixin,
    ToolCallsMixin,
):
    """The conversation database.

    Create it with `Store.open`. Methods may be called from any thread (access is
    serialised); every write is one transaction. Environment failures raise
    `StoreError`, unknown ids raise `NotFoundError` (a `StoreError`), bad arguments
    raise `ValueError`.

    Attributes:
        recovered_from: Where a damaged database file was set aside when this
            store opened, or None. The UI and CLI tell the user about it
            (`recovery_notice`).
        salvage: What was copied out of that damaged file, or None.
        rebuilt_search_index: Whether a damaged search index was rebuilt in place
            when this store opened.
        recovered_replies: How many replies a writer that is gone (a process that
            crashed, was killed or could not save) left ``generating``, marked
            ``interrupted`` when this store opened.
    """

    def __init__(
        self,
        db: Database,
        path: Path,
        clock: Callable[[], datetime],
        recovered_from: Path | None,
        salvage: SalvageReport | None = None,
        rebuilt_search_index: bool = False,
    ) -> None:
        """Wrap an opened, migrated database; use `Store.open` instead."""
        super().__init__(db, path, clock)
        self.recovered_from = recovered_from
        self.salvage = salvage
        self.rebuilt_search_index = rebuilt_search_index
        self.recovered_replies = 0
        self.read_only = False
        self._closed = False
        self._start_writing()

    @classmethod
    def open(
        cls,
        path: Path | str | None = None,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> Store:
        """Open the database, creating, repairing or migrating it as needed.

        A damaged search index is rebuilt in place (see `rebuilt_search_index`); a
        file damaged elsewhere has every readable row copied into a new file and is
        kept as ``<name>.corrupt-<UTC time>`` (see `recovered_from`, `salvage`); replies left ``generating`` by a writer that is
        gone become ``interrupted`` (see `recovered_replies`), while those another
        running process is writing are left alone.

        Args:
            path: The database file; defaults to `paths.database_path()`.
            clock: Returns the current aware datetime; tests pass a fake one.

        Returns:
            The open store; close it with `close` or use it as a context manager.

        Raises:
            StoreError: The file was written by a newer Swapless (it is left
                untouched), or cannot be opened or written.
        """
        if path is None:
            try:
                path = paths.database_path()
            except (FileExistsError, NotADirectoryError) as exc:
                raise StoreError(
                    f"{exc.filename} is a file, but Swapless keeps its data in a folder "
                    f"there. Move the file away, or set {paths.HOME_ENV} to a folder."
                ) from exc
            except OSError as exc:
                raise StoreError(
                    f"Swapless cannot create its data folder: {exc.strerror or exc} "
                    f"({exc.filename})."
                ) from exc
        path = Path(path)
        opened = open_database(path, clock())
        store = cls(
            opened.db,
            path,
            clock,
            opened.recovered_from,
            opened.salvage_report,
            opened.rebuilt_search_index,
        )
        try:
            store.recovered_replies = store.recover_interrupted()
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def open_read_only(
        cls,
        path: Path | str | None = None,
        *,
        clock: Callable[[], datetime] = utc_now,
    ) -> Store:
        """Open the database for reading only (a home on a read-only mount).

        Nothing is created, repaired, migrated or marked: listing, searching and
        exporting work, and any write fails.

        Args:
            path: The database file; defaults to `paths.database_path()`.
            clock: Returns the current aware datetime.

        Raises:
            StoreError: The file is missing or cannot be read as it is.
        """
        path = Path(path) if path is not None else paths.database_path()
        store = cls(open_read_only_database(path), path, clock, None)
        store.read_only = True
        return store

    def recovery_notice(self) -> str | None:
        """Return one sentence about a repair made when the store opened, or None."""
        if self.rebuilt_search_index:
            return (
                "The search index of the conversation database was damaged; it was "
                "rebuilt from the messages, and nothing was lost."
            )
        if self.recovered_from is None:
            return None
        if self.salvage is None:
            return (
                "The conversation database was damaged beyond reading; it was moved "
                f"to {self.recovered_from} and a new one was started."
            )
        return (
            "The conversation database was damaged: "
            f"{self.salvage.describe()[:-1]}. The damaged file is kept as "
            f"{self.recovered_from} (swapless import can read it again)."
        )

    def import_database(self, source: Path) -> tuple[list[int], SalvageReport]:
        """Import every readable conversation of another database file.

        For a file set aside after damage, or a copy from a backup: its readable
        rows are salvaged into a temporary database (``source`` is only read, from a
        copy), and each conversation is then imported as a new one.

        Args:
            source: A Swapless database file.

        Returns:
            The new conversations' ids (oldest first) and what could be read.

        Raises:
            InputError: ``source`` holds no readable conversation table.
        """
        with tempfile.TemporaryDirectory(prefix="swapless-import-") as folder:
            copy = Path(folder) / "source.db"
            shutil.copyfile(source, copy)
            for suffix in ("-wal",):
                sidecar = source.with_name(source.name + suffix)
                if sidecar.is_file():
                    shutil.copyfile(sidecar, copy.with_name(copy.name + suffix))
            report = copy_readable_rows(copy, Path(folder) / "salvaged.db")
            if "conversations" in report.unreadable_tables:
                raise InputError(
                    f"{source} has no conversations Swapless can read; it is not a "
                    "Swapless database, or it is damaged throughout."
                )
            with Store.open(Path(folder) / "salvaged.db") as old:
                ids = [
                    self.import_conversation(old.export_json(c.id)).conversation_id
                    for c in sorted(old.list_conversations(), key=lambda c: c.id)
                ]
        return ids, report

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    @property
    def db(self) -> Database:
        """The underlying sqlite-utils database, for tests and maintenance tools."""
        return self._db

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        with self._reading() as db:
            return schema_version(db)

    def close(self) -> None:
        """Close the database; the store cannot be used afterwards.

        Replies this store left ``generating`` become recoverable: the next store to
        open marks them ``interrupted``.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._stop_writing()
            finally:
                self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
