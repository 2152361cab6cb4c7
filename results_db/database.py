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
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

from scalebench.config import VAR, statement_timeout_s

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

# Alembic is imported by the functions that migrate or read the schema's revisions, not here:
# a command that only reads (report, compare, regressions) never needs it, and it was a fifth
# of such a call's processor time (0.86 s, now 0.67 s, on a 2-core AMD EPYC of family 25,
# model 17).

MIGRATIONS = Path(__file__).with_name("migrations")

# The PostgreSQL advisory lock (a 64-bit key) held while migrating; the sweeps' ingest locks
# use the two-32-bit-key space, which never overlaps this one.
MIGRATION_LOCK = 0x5CA1EBE7C4_0001

# Seconds a SQLite connection waits for another writer before "database is locked".
SQLITE_BUSY_TIMEOUT_S = 60.0


class NoSuchFolder(ValueError):
    """A SQLite database named in a folder that does not exist (the message says which)."""


def _sqlite_folder(database: str) -> None:
    """Create the folder of the default database (``var/``); any other SQLite file must be
    named in a folder that exists, so that a mistyped path is refused rather than answered
    with a new, empty database somewhere else."""
    folder = Path(database).parent
    if folder.is_dir():
        return
    if folder == VAR:
        folder.mkdir(parents=True, exist_ok=True)
        return
    raise NoSuchFolder(
        f"the SQLite database {database} is in a folder that does not exist ({folder}); "
        "create it first, or name a file in an existing folder"
    )


def _uri_without_uri(parsed: URL) -> None:
    """Refuse a SQLite database named like a URI (``file:…``) without ``uri=true``: SQLite
    would create a file of that very name (``file::memory:?cache=shared`` included)."""
    database = parsed.database or ""
    if database.startswith("file:") and parsed.query.get("uri") != "true":
        raise NoSuchFolder(
            f"the SQLite database {database[:80]!r} is named like a SQLite URI, which without "
            "?uri=true would be created as a file of that name; name a file, e.g. "
            "sqlite:////path/to/results.db"
        )


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets foreign keys on and, for the default database,
    its folder created (:class:`NoSuchFolder` for another file whose folder is missing, or
    a name that is a URI without ``uri=true``)."""
    parsed = make_url(url)
    connect_args = _connect_args(parsed)  # reads its setting whatever the database
    if parsed.get_backend_name() == "sqlite":
        _uri_without_uri(parsed)
        if parsed.database and parsed.database != ":memory:" and "uri" not in parsed.query:
            _sqlite_folder(parsed.database)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    return create_engine(url, pool_pre_ping=True, connect_args=connect_args)


# Seconds a PostgreSQL connection may take to be made, handshake and login included: a
# server that accepts the connection and never answers is given up on, naming this limit.
CONNECT_TIMEOUT_S = 10


def _connect_args(parsed: URL, read_only: bool = False) -> dict[str, object]:
    """psycopg2's connection settings: :data:`CONNECT_TIMEOUT_S` unless the URL sets one,
    the server's ``statement_timeout`` from ``SCALEBENCH_STATEMENT_TIMEOUT_S`` (its watch
    below counts from this setting, whatever the URL's ``options`` hold), and a connection
    whose waits for the server are bounded by that timeout (:mod:`results_db.pg_watch`).
    ``read_only``: every transaction read-only, whatever the URL's options say."""
    timeout_s = statement_timeout_s()  # a bad setting is refused whatever the database
    if parsed.get_driver_name() != "psycopg2":
        return {}
    from results_db.pg_watch import watched_connection

    options = [f"-c statement_timeout={round(timeout_s * 1000)}"]
    own = parsed.query.get("options")
    options.extend([own] if isinstance(own, str) else own or ())
    if read_only:  # last: the URL's options cannot undo it
        options.append("-c default_transaction_read_only=on")
    settings: dict[str, object] = {
        "options": " ".join(options),
        "connection_factory": watched_connection(timeout_s),
    }
    if "connect_timeout" not in parsed.query:
        settings["connect_timeout"] = CONNECT_TIMEOUT_S
    return settings


def readonly_url(url: str, once: bool = False) -> URL:
    """``url`` opened read-only where the driver allows it (SQLite files: ``mode=ro``).

    ``once``: for a read that ends at once (a report, an export), a SQLite file that this
    process can write neither to nor beside (a read-only copy or mount) and that has no
    write-ahead log beside it is opened ``immutable``: SQLite then needs no lock file,
    which it could not create there. A reader that stays (the dashboard) never is: it
    would not see later writes."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return parsed
    if parsed.database.startswith("file:"):  # already a URI
        return parsed.update_query_dict({"mode": "ro", "uri": "true"})
    path = Path(parsed.database).expanduser().resolve()
    query = {"mode": "ro", "uri": "true"}
    if once and _frozen(path):
        query["immutable"] = "1"
    return parsed.set(database=f"file:{quote(str(path))}").update_query_dict(query)


def _frozen(path: Path) -> bool:
    """Whether the SQLite file ``path`` can be read as it is on disk: this process can
    write neither it nor its folder, and no write-ahead log holds changes beside it."""
    wal = path.with_name(path.name + "-wal")
    return (
        path.is_file()
        and not os.access(path, os.W_OK)
        and not os.access(path.parent, os.W_OK)
        and (not wal.exists() or wal.stat().st_size == 0)
    )


def readonly_engine(url: str, once: bool = False) -> Engine:
    """An engine that cannot write: SQLite read-only URI, PostgreSQL read-only sessions.
    Nothing is created: a SQLite file that does not exist stays missing. ``once``: see
    :func:`readonly_url`."""
    parsed = readonly_url(url, once)
    connect_args = _connect_args(parsed, read_only=True)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg2":
        return create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    return create_engine(parsed, pool_pre_ping=parsed.get_backend_name() != "sqlite")


def sqlite_file(url: str) -> Path | None:
    """The file a SQLite URL names (``None``: not SQLite, or in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    database = parsed.database
    if database.startswith("file:"):
        database = database.removeprefix("file:").split("?", 1)[0]
    return Path(database).expanduser()


def sessions(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision`` (default: the newest).

    Concurrent calls on one database take turns (see the module's docstring): the first
    migrates, the others wait for it and then find nothing left to do.
    """
    from alembic import command

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
    (nothing for an in-memory database or another database); also creates the default
    database's folder."""
    parsed = make_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        yield  # another database's driver, refusing it, is the first thing to speak
        return
    _uri_without_uri(parsed)
    if "uri" in parsed.query:  # a URI SQLite reads itself: no file of that name to lock
        yield
        return
    _sqlite_folder(database)
    path = Path(database)
    with open(path.with_name(path.name + ".migrate-lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def _scripts() -> ScriptDirectory:
    """This code's migration scripts (no database is opened)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def revisions() -> list[str]:
    """Every revision of the schema this code has, oldest first."""
    return [rev.revision for rev in reversed(list(_scripts().walk_revisions()))]


def head_revision() -> str:
    head = _scripts().get_current_head()
    assert head is not None
    return head
