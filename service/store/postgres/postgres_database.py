"""The index's connections to PostgreSQL: a pool, each thread's locked
transaction, and the database's faults as `StorageUnavailable`.

Owns `Database`. `locked(key)` is a transaction holding the advisory lock
`key` (`pg_advisory_xact_lock`), exclusive across every process on every
machine; every statement this thread runs inside it (`rows`, `one`,
`change`) runs in that transaction, committed at the end and rolled back on
an exception. Outside it, each statement takes a pooled connection in
autocommit. Only one thread of a process waits for the lock, so waiting
commits hold one connection, not the pool.

The URL is a libpq one (`postgresql://user@host:port/db?sslmode=...`) and may
leave out the password: libpq reads PGPASSWORD and the password file
(PGPASSFILE, else ~/.pgpass) by itself. A database that does not answer (no
connection within `timeout` seconds, a connection refused or lost mid-call,
a password or a database refused) is `StorageUnavailable`, never a driver's
exception: its detail says what failed in kind, its `operator` text names
the database (host, port, database, user: never the password) and what the
server or libpq said (when the pool only timed out, one direct connection
is tried to learn why: `open` and `check`, never a request). The pool drops
broken connections (each is checked as it is taken) and reconnects by
itself once the database is back. `migrating` is a transaction holding the
schema lock.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, LiteralString

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import ConnectionPool, PoolTimeout

from service.errors import StorageUnavailable, bounded
from service.store.sql.database import SCHEMA_LOCK, Row
from service.store.sql.dialect import POSTGRES, Dialect

log = logging.getLogger("service.store")

Connection = psycopg.Connection[TupleRow]

CHECK_AFTER_SECONDS = 1.0
DIAGNOSIS_SECONDS = 2  # a direct connection's wait, to learn why the pool has none


def _first_line(error: BaseException) -> str:
    return bounded((str(error).strip().splitlines() or [type(error).__name__])[0], 300)


class Database:
    dialect = POSTGRES  # `service.store.sql.database.SqlDatabase`

    def __init__(self, url: str, *, pool_size: int, timeout: float) -> None:
        self.url = url
        # libpq would read PGPASSWORD at each connection; it is read once here,
        # as the import workers' fork server starts without it (service.sandbox.environment).
        self.password = os.environ.get("PGPASSWORD") if not conninfo_to_dict(url).get("password") else None
        self.pool_size = pool_size
        self.timeout = timeout  # seconds to wait for a connection, and to open
        self._pool: ConnectionPool[Connection] | None = None
        self._mutex = threading.RLock()  # one thread of this process at a time waits for the database's lock
        self._held = threading.local()  # .connection: the transaction of this thread's locked() block
        self._last_returned: weakref.WeakKeyDictionary[Connection, float] = weakref.WeakKeyDictionary()
        parts = conninfo_to_dict(url)
        where = f"{parts.get('host') or 'localhost'}:{parts.get('port') or 5432}"
        self.target = f"PostgreSQL at {where}, database {parts.get('dbname') or '(default)'}, user {parts.get('user') or '(default)'}"

    def open(self) -> None:
        """Connect; StorageUnavailable after `timeout` seconds."""
        if self._pool is not None:
            return
        pool: ConnectionPool[Connection] = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_size,
            open=False,
            timeout=self.timeout,
            check=self._check_if_idle,  # a connection broken while idle is dropped, not handed out
            reset=self._returned,
            name="onnx-index",
            kwargs={
                **({"password": self.password} if self.password else {}),
                "autocommit": True,
                "application_name": "onnx-import-service",
                "connect_timeout": max(2, math.ceil(self.timeout)),  # libpq's least is 2 s
                "keepalives": 1,  # a database gone silent (not closed) fails the call within about 25 s
                "keepalives_idle": 10,
                "keepalives_interval": 5,
                "keepalives_count": 3,
            },
        )
        try:
            with self.answering(diagnose=True):
                pool.open(wait=True, timeout=self.timeout)
        except BaseException:
            pool.close()
            raise
        self._pool = pool

    def _returned(self, connection: Connection) -> None:
        self._last_returned[connection] = time.monotonic()

    def _check_if_idle(self, connection: Connection) -> None:
        """The pool's check of a connection it hands out: a round trip only for
        one idle over CHECK_AFTER_SECONDS (one just used is known good: a check
        each time would cost a third of a lookup)."""
        if time.monotonic() - self._last_returned.get(connection, 0.0) > CHECK_AFTER_SECONDS:
            ConnectionPool.check_connection(connection)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    @contextlib.contextmanager
    def answering(self, *, diagnose: bool = False) -> Iterator[None]:
        """The database's faults as StorageUnavailable (PoolTimeout is an
        OperationalError); with `diagnose`, a pool's timeout is followed by one
        direct connection, whose error says why."""
        try:
            yield
        except (psycopg.OperationalError, psycopg.InterfaceError) as error:
            timed_out = isinstance(error, PoolTimeout)
            said = (self._diagnosis() if diagnose else "") if timed_out else _first_line(error)
            reason = f"no connection within {self.timeout:g} s" if timed_out else "the connection failed or was lost"
            operator = f"the index's database does not answer: {reason} ({self.target}{': ' + said if said else ''})"
            log.warning("%s", operator)
            raise StorageUnavailable(f"the index's database does not answer: {reason}", operator=operator) from error

    def _diagnosis(self) -> str:
        """Why no connection comes: the error of one direct connection ('' if it connects)."""
        try:
            psycopg.connect(self.url, connect_timeout=DIAGNOSIS_SECONDS, password=self.password).close()
        except psycopg.Error as error:
            return _first_line(error)
        return ""

    def check(self) -> None:
        """StorageUnavailable, saying why, if the database does not answer now (readiness)."""
        with self.answering(diagnose=True), self._open_pool().connection() as connection:
            connection.execute("SELECT 1")

    @contextlib.contextmanager
    def migrating(self) -> Iterator[PostgresMigrating]:
        """A transaction holding the schema lock: one replica migrates at a time."""
        with self.locked(SCHEMA_LOCK), self.connection() as connection:
            yield PostgresMigrating(connection)

    def _open_pool(self) -> ConnectionPool[Connection]:
        if self._pool is None:
            raise RuntimeError("the PostgreSQL index is not open")
        return self._pool

    @contextlib.contextmanager
    def locked(self, key: int) -> Iterator[None]:
        """A transaction holding the advisory lock `key`; re-entrant in a thread (nested blocks just run)."""
        if getattr(self._held, "connection", None) is not None:
            yield
            return
        with self._mutex, self.answering(), self._open_pool().connection() as connection, connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
            self._held.connection = connection
            try:
                yield
            finally:
                self._held.connection = None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction of this thread's statements, holding no lock (re-entrant: within another, that one)."""
        if getattr(self._held, "connection", None) is not None:
            yield
            return
        with self.answering(), self._open_pool().connection() as connection, connection.transaction():
            self._held.connection = connection
            try:
                yield
            finally:
                self._held.connection = None

    @contextlib.contextmanager
    def connection(self) -> Iterator[Connection]:
        """The connection of this thread's locked() block, else a pooled one in autocommit."""
        held: Connection | None = getattr(self._held, "connection", None)
        with self.answering():
            if held is not None:
                yield held
            else:
                with self._open_pool().connection() as connection:
                    yield connection

    def rows(self, query: LiteralString, params: Sequence[Any] = ()) -> list[TupleRow]:
        with self.connection() as connection:
            return connection.execute(query, params).fetchall()

    def one(self, query: LiteralString, params: Sequence[Any] = ()) -> TupleRow | None:
        with self.connection() as connection:
            return connection.execute(query, params).fetchone()

    def changed_rows(self, query: LiteralString, params: Sequence[Any] = (), *, durable: bool = True) -> list[TupleRow]:
        """A change's RETURNING rows (`durable` is the server's to keep)."""
        return self.rows(query, params)

    def change(self, query: LiteralString, params: Sequence[Any] = (), *, durable: bool = True) -> int:
        """Run a change; the number of rows it changed (`durable` is the
        server's to keep: each commit waits for its disk)."""
        with self.connection() as connection:
            return connection.execute(query, params).rowcount


class PostgresMigrating:
    """`service.store.sql.database.Migrating` on the connection of the schema lock's transaction."""

    dialect: Dialect = POSTGRES

    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    def execute(self, statement: str, params: Sequence[Any] = ()) -> list[Row]:
        cursor = self.connection.execute(statement, params or None)
        return cursor.fetchall() if cursor.description is not None else []

    def executemany(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        if rows:
            self.connection.cursor().executemany(statement, rows)
