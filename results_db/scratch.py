"""A throwaway PostgreSQL database: created beside an administrator's URL, dropped after use.

The tests, the dashboard seed and the benchmarks measure against real
PostgreSQL databases of their own; this is the one place that creates and
drops them (``DROP ... WITH (FORCE)``: connections a failed test left open
do not keep it alive).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


@contextmanager
def scratch_database(
    admin_url: str,
    prefix: str = "scalebench_scratch",
    migrate: bool = True,
    template: str | None = None,
) -> Iterator[str]:
    """A new database named ``<prefix>_<random>`` on ``admin_url``'s server (its URL, with the
    administrator's credentials), migrated to the results schema unless ``migrate`` is
    false; dropped on leaving, whatever happened inside. With ``template`` (a database's
    name, to which nothing is connected) it starts as a copy of that database instead."""
    from results_db.database import upgrade

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            copied = f' TEMPLATE "{template}"' if template else ""
            conn.execute(text(f'CREATE DATABASE "{name}"{copied}'))
        url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
        try:
            if migrate:
                upgrade(url)
            yield url
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()
