"""Writes that keep the results database usable: the price table and the read-only role
(which reads every table and may change one thing only: a nightly finding's triage).

Each function takes an ``Engine`` and does its work in one transaction, so a
failure part-way leaves the database as it was. Input is expected checked
already (the command line does that and words the errors); prices are in US
dollars per hour.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, delete, insert, text

from results_db.models import Price


def store_prices(engine: Engine, rows: Iterable[dict[str, Any]]) -> int:
    """Insert or replace prices keyed by (kind, name, valid_from); returns how many.

    Each row names the :class:`~results_db.models.Price` columns: ``kind``
    (``instance`` or ``gpu``), ``name``, ``regular_per_hour`` and
    ``preemptible_per_hour`` (dollars per hour), ``source`` and ``valid_from``
    (a timezone-aware datetime).
    """
    count = 0
    with engine.begin() as conn:
        for row in rows:
            conn.execute(
                delete(Price).where(
                    Price.kind == row["kind"],
                    Price.name == row["name"],
                    Price.valid_from == row["valid_from"],
                )
            )
            conn.execute(insert(Price).values(**row))
            count += 1
    return count


# What a read-only role may do in the results database: connect, see the public
# schema, read every table there now and every table a migration adds later.
# ``{database}`` and ``{role}`` are quoted identifiers.
READONLY_GRANTS = (
    # As docker/postgres/init.sql: no one connects or makes temporary tables by default...
    "REVOKE CONNECT, TEMPORARY ON DATABASE {database} FROM PUBLIC",
    # ...the read-only role may connect, and nothing more.
    "GRANT CONNECT ON DATABASE {database} TO {role}",
    "GRANT USAGE ON SCHEMA public TO {role}",
    "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}",
    "ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {role}",
    "REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public FROM {role}",
)
# The one write the read-only role may make: the dashboard's triage of a nightly finding, its
# state and note (and when the state changed), nothing else of that row or of any other table.
# After the REVOKE above, which takes back every column's privileges too. Granted where the
# table exists (a schema from before the paired nightly has none; grant again after upgrading).
TRIAGE_TABLE = "nightly_finding"
TRIAGE_COLUMNS = ("state", "note", "state_changed_at")
TRIAGE_GRANT = "GRANT UPDATE ({columns}) ON TABLE {table} TO {role}"


class NotReadOnly(ValueError):
    """A role that can never be read-only, whatever is granted to it."""


def grant_readonly_role(engine: Engine, role: str, password: str | None) -> None:
    """PostgreSQL only: create login ``role`` if it does not exist, set its password when
    given, and let it read the tables of the engine's database and, of all it holds, change
    only a nightly finding's triage (:data:`TRIAGE_COLUMNS` of :data:`TRIAGE_TABLE`)."""
    quote = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        exists = conn.execute(
            text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}
        ).first()
        powers = conn.execute(
            text("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = :r"), {"r": role}
        ).first()
        if powers is not None and (powers.rolsuper or powers.rolbypassrls):
            raise NotReadOnly(
                f"{role} is a superuser (or bypasses row security): it reads and writes "
                "whatever it likes, so it cannot be made a read-only login; name a role of its "
                "own"
            )
        if not exists:
            conn.execute(text(f"CREATE ROLE {quote(role)} LOGIN"))
        if password is not None:
            # PASSWORD takes no bind parameter; quote the literal with PostgreSQL's own rules.
            literal = conn.execute(text("SELECT quote_literal(:p)"), {"p": password}).scalar_one()
            conn.execute(text(f"ALTER ROLE {quote(role)} PASSWORD {literal}"))
        database = conn.execute(text("SELECT current_database()")).scalar_one()
        for statement in READONLY_GRANTS:
            conn.execute(text(statement.format(database=quote(database), role=quote(role))))
        triage = conn.execute(
            text("SELECT to_regclass(:t) IS NOT NULL"), {"t": f"public.{TRIAGE_TABLE}"}
        ).scalar_one()
        if triage:
            columns = ", ".join(quote(c) for c in TRIAGE_COLUMNS)
            conn.execute(
                text(
                    TRIAGE_GRANT.format(
                        columns=columns, table=quote(TRIAGE_TABLE), role=quote(role)
                    )
                )
            )
