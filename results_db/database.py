"""Connecting to the results database and bringing its schema up to date.

``SCALEBENCH_DATABASE_URL`` picks the database: PostgreSQL in deployment
(``postgresql+psycopg2://user@host/db``), an embedded SQLite file by default.
Both get the same Alembic migrations.

Several processes may migrate one database at once (every ``scalebench ingest``
and ``run`` migrates first): on PostgreSQL the migration takes a transaction-level
advisory lock (:data:`MIGRATION_LOCK`), on SQLite an exclusive lock on a file beside
the database, so one migrates and the others then find it up to date. SQLite
connections wait up to :data:`SQLITE_BUSY_TIMEOUT_S` for another writer.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS = Path(__file__).with_name("migrations")

# The PostgreSQL advisory lock (a 64-bit key) held while migrating; the sweeps' ingest locks
# use the two-32-bit-key space, which never overlaps this one.
MIGRATION_LOCK = 0x5CA1EBE7C4_0001

# Seconds a SQLite connection waits for another writer before "database is locked".
SQLITE_BUSY_TIMEOUT_S = 60.0


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys on and its folder created."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True)


def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (default: the newest).

    Concurrent calls on one database take turns (see the module's docstring): the first
    migrates, the others wait for it and then find nothing left to do.
    """
    config = alembic_config(url)
    if make_url(url).get_backend_name() != "postgresql":
        with _sqlite_migration_lock(url):
            command.upgrade(config, revision)
        return
    engine = make_engine(url)
    try:
        # One transaction: the lock, then every migration (PostgreSQL's DDL is
        # transactional); the lock goes with the commit, after the new schema is visible.
        with engine.begin() as connection:
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


@contextmanager
def _sqlite_migration_lock(url: str) -> Iterator[None]:
    """An exclusive lock on ``<database file>.migrate-lock`` while migrating a SQLite file
    (nothing for an in-memory database); also creates the file's folder."""
    database = make_url(url).database
    if not database or database == ":memory:":
        yield
        return
    path = Path(database)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".migrate-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head
