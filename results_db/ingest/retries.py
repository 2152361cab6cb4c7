"""Waiting for a database that went away: which errors are its going away
(:func:`transient`), and trying a transaction again after each of :data:`RETRY_DELAYS_S`
(:func:`with_retries`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import OperationalError

T = TypeVar("T")


# Waits between tries when the database drops the connection or restarts: about half a
# minute in all, then the error stands (the Airflow task retries on a longer scale).
RETRY_DELAYS_S = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` is the database going away (a dropped connection, a restart, a
    server not answering yet), which the same work may survive if tried again. A statement
    that outlived the statement timeout (cancelled by the server, or unanswered and hung up
    on) is not: it would take as long again."""
    import psycopg2  # a declared dependency; imported here, where PostgreSQL is in use
    import psycopg2.errors

    from results_db.pg_watch import NoAnswer

    if isinstance(getattr(exc, "orig", None) or exc, NoAnswer | psycopg2.errors.QueryCanceled):
        return False
    if isinstance(exc, OperationalError) or getattr(exc, "connection_invalidated", False):
        return True
    # a COPY talks to psycopg2 directly: its errors come unwrapped
    return isinstance(exc, psycopg2.OperationalError | psycopg2.InterfaceError)


def with_retries(action: Callable[[], T], say: Callable[[str], None], what: str) -> T:
    """``action()``, tried again after each of :data:`RETRY_DELAYS_S` while the database
    is away; each action is one transaction, so a try that failed left nothing behind."""
    for delay in (*RETRY_DELAYS_S, None):
        try:
            return action()
        except Exception as exc:
            if delay is None or not transient(exc):
                raise
            first_line = (str(getattr(exc, "orig", None) or exc).strip().splitlines() or [""])[0]
            say(f"{what}: the database did not answer ({first_line}); trying again in {delay:g} s")
            time.sleep(delay)
    raise AssertionError("unreachable")
