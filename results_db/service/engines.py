"""The results database as a whole, for the commands: engines for its URL (read-write or
read-only), the words of a bad command's input (:class:`CommandError`), its schema's upgrade,
its read-only roles, and one line for a database that cannot be used
(:func:`database_problem`)."""

from __future__ import annotations

import re
from traceback import walk_tb

from sqlalchemy import exc as db
from sqlalchemy.engine import make_url

from results_db.database import (
    CONNECT_TIMEOUT_S,
    NoSuchFolder,
    make_engine,
    readonly_engine,
    revisions,
    sqlite_file,
)
from results_db.database import upgrade as migrate
from results_db.maintenance import NotReadOnly, grant_readonly_role
from scalebench import config


class CommandError(ValueError):
    """Bad input to a database command; the message names the field."""


def redact(url: str) -> str:
    """``url`` without its password, for printing."""
    return make_url(url).render_as_string(hide_password=True)


def engine_for(url: str | None):  # type: ignore[no-untyped-def]
    """An engine for ``url`` (None: ``SCALEBENCH_DATABASE_URL``)."""
    return make_engine(url or config.database_url())


def reader_for(url: str | None):  # type: ignore[no-untyped-def]
    """A read-only engine for ``url`` (None: ``SCALEBENCH_DATABASE_URL``), for the commands
    that only read (``report``, ``export``, ``prices list``): it creates no file or folder,
    and reads a SQLite file that cannot be written (see
    :func:`results_db.database.readonly_url`). A SQLite file that does not exist is
    refused naming it."""
    url = url or config.database_url()
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise CommandError(
            f"database: there is no results database at {path}; this command only reads "
            "(run or ingest a sweep first, or give --database)"
        )
    return readonly_engine(url, once=True)


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` to ``revision``: ``head`` or one of this code's
    revisions by its id. Anything else (Alembic's relative forms such as ``0009@+3``, which
    it may read as another revision) is refused naming it before the database is touched,
    and so is a revision Alembic cannot reach from where the database is."""
    from alembic.util import CommandError as AlembicError

    known = revisions()
    if revision != "head" and revision not in known:
        raise CommandError(
            f"revision: {revision[:40]!r} is not a schema revision of this scalebench; use "
            f"head or one of {', '.join(known)}"
        )
    try:
        migrate(url, revision)
    except AlembicError as exc:
        raise CommandError(f"revision: {exc}") from None


def os_reason(exc: OSError) -> str:
    """What an ``OSError`` says, as words: its reason and the path it concerns, without
    the ``[Errno n]`` of its repr."""
    if not exc.strerror:
        return str(exc)
    return exc.strerror + (f" ({exc.filename})" if exc.filename else "")


ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def grant_readonly(url: str | None, role: str, password: str | None) -> None:
    """Create (if needed) a PostgreSQL login that can only read the results tables, and
    change a nightly finding's triage (its state and note: the dashboard's one write)."""
    if not ROLE_NAME.match(role):
        raise CommandError(f"role: {role!r} is not a plain lower-case PostgreSQL name")
    engine = engine_for(url)
    if engine.dialect.name != "postgresql":
        raise CommandError("database: read-only roles exist on PostgreSQL only")
    try:
        grant_readonly_role(engine, role, password)
    except NotReadOnly as exc:
        raise CommandError(f"role: {exc}") from None
    finally:
        engine.dispose()


SCHEMA_MISSING = re.compile(r"no such (table|column)|(relation|column) \S+ does not exist")
SUPPORTED_DATABASES = "sqlite:///<file> or postgresql+psycopg2://<user>@<host>:<port>/<database>"


def database_problem(exc: BaseException) -> str | None:
    """One line for a results database that cannot be used, or None for any other error.

    Shown instead of a traceback (``SCALEBENCH_DEBUG=1`` shows the traceback).
    """
    if isinstance(exc, NoSuchFolder):
        return f"database: {exc} (--database or SCALEBENCH_DATABASE_URL)"
    if isinstance(exc, db.ArgumentError | db.NoSuchModuleError):
        return (
            f"database: not a results database URL ({exc.args[0].splitlines()[0]}); use "
            f"{SUPPORTED_DATABASES} (--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, ValueError) and any(  # the URL's parser, on a port or host it cannot read
        frame.f_code.co_filename.endswith("sqlalchemy/engine/url.py")
        for frame, _ in walk_tb(exc.__traceback__)
    ):
        return (
            f"database: not a results database URL ({exc}); use {SUPPORTED_DATABASES} "
            "(--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, ModuleNotFoundError) and any(  # a dialect importing its driver
        "sqlalchemy" in frame.f_code.co_filename for frame, _ in walk_tb(exc.__traceback__)
    ):
        return (
            f"database: this URL needs a driver scalebench does not install ({exc.name}); "
            f"use {SUPPORTED_DATABASES} (--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, db.DBAPIError) and SCHEMA_MISSING.search(str(exc.orig or exc)):
        return (
            "database: the results database has no scalebench schema, or an older one "
            "than this scalebench reads; run `scalebench db upgrade` (with the same "
            "--database or SCALEBENCH_DATABASE_URL)"
        )
    if isinstance(exc, db.OperationalError):
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        if reason.endswith("timeout expired"):
            reason += (
                f" (no answer within the connect timeout: {CONNECT_TIMEOUT_S} s, unless "
                "?connect_timeout=<seconds> in the URL sets another)"
            )
        return (
            f"database: cannot use the results database: {reason}. Is the server running "
            "and the URL right (--database or SCALEBENCH_DATABASE_URL)?"
        )
    if isinstance(exc, db.DatabaseError):  # e.g. SQLite: "file is not a database"
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        return (
            f"database: cannot read the results database: {reason}. Does the URL name a "
            "scalebench database (--database or SCALEBENCH_DATABASE_URL)?"
        )
    return None
