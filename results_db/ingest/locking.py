"""Ingests of the same sweep at once take turns: on PostgreSQL each holds an advisory lock
keyed on the sweep id (:func:`sweep_lock`) while it loads the sweep; elsewhere the
database's own write lock does."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, text

from results_db.ingest.retries import with_retries

# The first of the two 32-bit keys of the sweeps' advisory locks (the second: a hash of the
# sweep id); PostgreSQL keeps two-key locks apart from the one-key migration lock.
SWEEP_LOCK_SPACE = 0x5CA1E


def sweep_lock_key(sweep_id: str) -> int:
    """The second key of sweep ``sweep_id``'s advisory lock: a signed 32-bit hash of its id
    (two sweeps that share one merely take turns)."""
    digest = hashlib.blake2b(sweep_id.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def sweep_lock(engine: Engine, sweep_id: str, say: Callable[[str], None]) -> Iterator[None]:
    """On PostgreSQL, hold sweep ``sweep_id``'s advisory lock (a session lock on a connection
    of its own) while the body runs, telling ``say`` when another ingest of it is waited for;
    elsewhere nothing. A connection that drops takes its lock with it."""
    if engine.dialect.name != "postgresql":
        yield
        return
    keys = {"space": SWEEP_LOCK_SPACE, "key": sweep_lock_key(sweep_id)}

    def acquire() -> Connection:
        conn = engine.connect()
        try:
            got = conn.execute(text("SELECT pg_try_advisory_lock(:space, :key)"), keys).scalar()
            if not got:
                say(f"sweep {sweep_id}: waiting for another ingest of it to end")
                conn.execute(text("SELECT pg_advisory_lock(:space, :key)"), keys)
            conn.commit()
        except BaseException:
            conn.invalidate()  # closing the session releases whatever it holds
            conn.close()
            raise
        return conn

    conn = with_retries(acquire, say, f"sweep {sweep_id}")
    try:
        yield
    finally:
        try:
            conn.execute(text("SELECT pg_advisory_unlock(:space, :key)"), keys)
            conn.commit()
        except Exception:
            conn.invalidate()  # the session (and with it the lock) is gone or going
        conn.close()
