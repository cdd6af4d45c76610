"""The SQLite file the local index lives in: connections, the lock, faults.

Owns `SqliteDatabase` (`service.store.sql.database.SqlDatabase`). Each
thread of each process has its own connection, in autocommit, in
write-ahead-log mode (readers never wait for the writer, nor it for them;
`open` sets it, once for the file).
`locked(key)` is a `BEGIN IMMEDIATE` transaction, whatever the key: it holds
the database's one write lock, so changes are serialized across every
thread and process that shares the file (one thread of a process waits for
it at a time), and so are the migrations (`migrating`); every
statement the thread runs inside it runs in that transaction, committed at
the end, rolled back on an exception. A commit waits for the disk
(`synchronous=FULL`) unless the change says it need not (`durable=False`: a
last use). A full disk is the OSError ENOSPC the service answers 507 with;
any other fault of the file is `StorageUnavailable`.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NoReturn

from service.errors import StorageUnavailable
from service.store.sql.database import Row
from service.store.sql.dialect import SQLITE, Dialect

log = logging.getLogger("service.store")
BUSY_SECONDS = 60.0  # a writer waits this long for another's lock before the index is unavailable


@lru_cache(maxsize=256)
def _native(query: str) -> str:
    """A query's `%s` placeholders as SQLite's `?` (the queries hold no other `%`)."""
    return query.replace("%s", "?")


class SqliteDatabase:
    dialect = SQLITE

    def __init__(self, path: Path, *, busy_seconds: float = BUSY_SECONDS) -> None:
        self.path = path
        self.busy_seconds = busy_seconds
        self._local = threading.local()  # .connection, .pid, .held (in this thread's locked block)
        self._mutex = threading.RLock()  # one thread of this process at a time waits for the write lock
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (a new one in a forked child)."""
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None or self._local.pid != os.getpid():
            with self.answering():
                connection = sqlite3.connect(self.path, timeout=self.busy_seconds, isolation_level=None, check_same_thread=False)
                connection.execute("PRAGMA synchronous=FULL")
            self._local.connection, self._local.pid, self._local.held = connection, os.getpid(), False
            with self._all_lock:
                self._all.append(connection)
        return connection

    def open(self) -> None:
        """The file made (if new, and its folder) and put in write-ahead-log
        mode, which it keeps. Several processes opening a new file at once: the
        switch takes a lock SQLite does not wait for, so a refused one is tried again."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + self.busy_seconds
        while True:
            try:
                self.connection().execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    with self.answering():
                        raise
                time.sleep(0.01)

    def close(self) -> None:
        with self._all_lock:
            connections, self._all = self._all, []
        for connection in connections:
            with contextlib.suppress(sqlite3.Error):
                connection.close()
        self._local = threading.local()

    def check(self) -> None:
        self.one("SELECT 1")

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """SQLite's faults as the service's (`_raise_fault`)."""
        try:
            yield
        except sqlite3.Error as error:
            _raise_fault(error)

    def transaction(self) -> contextlib.AbstractContextManager[None]:
        return self.locked(0)

    @contextlib.contextmanager
    def migrating(self) -> Iterator[SqliteMigrating]:
        """The migrations' transaction: the write lock, so one process migrates at a time."""
        with self.locked(0):
            yield SqliteMigrating(self.connection())

    @contextlib.contextmanager
    def locked(self, key: int = 0) -> Iterator[None]:
        """A transaction holding the write lock (every key is that one lock); re-entrant in a thread (nested blocks just run)."""
        connection = self.connection()
        if self._local.held:
            yield
            return
        with self._mutex:
            with self.answering():
                connection.execute("BEGIN IMMEDIATE")
            self._local.held = True
            try:
                yield
            except BaseException:
                self._local.held = False
                with contextlib.suppress(sqlite3.Error):
                    connection.execute("ROLLBACK")
                raise
            self._local.held = False
            try:
                with self.answering():
                    connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:  # a commit that failed (a full disk) leaves it open
                    with contextlib.suppress(sqlite3.Error):
                        connection.execute("ROLLBACK")
                raise

    # The statements: a try block, not `answering()` (a context manager's generator costs a third of a lookup).

    def rows(self, query: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            return self.connection().execute(_native(query), params).fetchall()
        except sqlite3.Error as error:
            _raise_fault(error)

    def one(self, query: str, params: Sequence[Any] = ()) -> Row | None:
        try:
            row: Row | None = self.connection().execute(_native(query), params).fetchone()
            return row
        except sqlite3.Error as error:
            _raise_fault(error)

    def change(self, query: str, params: Sequence[Any] = (), *, durable: bool = True) -> int:
        connection = self.connection()
        try:
            if durable or self._local.held:
                return connection.execute(_native(query), params).rowcount
            connection.execute("PRAGMA synchronous=NORMAL")
            try:
                return connection.execute(_native(query), params).rowcount
            finally:
                connection.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as error:
            _raise_fault(error)

    def changed_rows(self, query: str, params: Sequence[Any] = (), *, durable: bool = True) -> list[Row]:
        """Every row read, so SQLite ends the statement (and its transaction) at once."""
        connection = self.connection()
        try:
            if durable or self._local.held:
                return connection.execute(_native(query), params).fetchall()
            connection.execute("PRAGMA synchronous=NORMAL")
            try:
                return connection.execute(_native(query), params).fetchall()
            finally:
                connection.execute("PRAGMA synchronous=FULL")
        except sqlite3.Error as error:
            _raise_fault(error)


class SqliteMigrating:
    """`service.store.sql.database.Migrating` on this thread's connection, in the locked transaction."""

    dialect: Dialect = SQLITE

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[Row]:
        try:
            return self.connection.execute(_native(statement), params).fetchall()
        except sqlite3.Error as error:
            _raise_fault(error)

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        try:
            self.connection.executemany(_native(statement), rows)
        except sqlite3.Error as error:
            _raise_fault(error)


def _raise_fault(error: sqlite3.Error) -> NoReturn:
    """SQLite's fault as the service's: a full disk as ENOSPC, any other of the
    file as StorageUnavailable; a fault of the query as it is."""
    if getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        raise OSError(errno.ENOSPC, f"the index's database is full: {error}") from error
    if isinstance(error, (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError)):
        raise error
    log.warning("the index's database fails: %s", error)
    raise StorageUnavailable(f"the index's database fails: {error}") from error
