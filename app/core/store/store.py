"""`Store`: the one object the CLI and the UI use to keep conversations.

The facade joins the subject mixins (conversations, messages, summaries, documents,
search, export, import) and owns the life cycle: `Store.open` checks, migrates and
recovers the database before anyone reads from it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from types import TracebackType

from sqlite_utils import Database

from app.core.errors import StoreError
from app.core.files import paths
from app.core.store.conversations import ConversationsMixin
from app.core.store.database import open_database
from app.core.store.documents import DocumentsMixin
from app.core.store.exchange.export import ExportMixin
from app.core.store.exchange.json_import import ImportMixin
from app.core.store.messages import MessagesMixin
from app.core.store.migrations import schema_version
from app.core.store.quality_results import QualityResultsMixin
from app.core.store.records import utc_now
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
):
    """The conversation database.

    Create it with `Store.open`. Methods may be called from any thread (access is
    serialised); every write is one transaction. Environment failures raise
    `StoreError`, unknown ids raise `NotFoundError` (a `StoreError`), bad arguments
    raise `ValueError`.

    Attributes:
        recovered_from: Where a corrupt database file was moved when this store
            opened, or None. The UI and CLI tell the user about it.
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
    ) -> None:
        """Wrap an opened, migrated database; use `Store.open` instead."""
        super().__init__(db, path, clock)
        self.recovered_from = recovered_from
        self.recovered_replies = 0
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

        A corrupt file is moved aside to ``<name>.corrupt-<UTC time>`` and a new one
        started (see `recovered_from`); replies left ``generating`` by a writer that is
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
        store = cls(opened.db, path, clock, opened.recovered_from)
        try:
            store.recovered_replies = store.recover_interrupted()
        except BaseException:
            store.close()
            raise
        return store

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
