"""Giving up on a PostgreSQL server that stops answering.

A slow server ends a slow statement itself: every connection sets its ``statement_timeout``
to :func:`scalebench.config.statement_timeout_s`. A server that never answers at all (hung,
or a proxy holding the connection open) ends nothing, and libpq has no client-side limit on
a query, so psycopg2 would wait forever. Each call that waits for the server (``execute``,
``executemany``, a COPY, ``commit``, ``rollback``) is therefore watched: when the server
has said nothing :data:`GRACE_S` seconds after its own timeout should have ended the
statement, the connection's socket is shut down, the call fails at once, and the error
(:class:`NoAnswer`) names the timeout.

One watcher thread per process serves every watched connection; it sleeps until the
earliest deadline and is idle while nothing waits.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.extensions

# Seconds the watcher waits past the server's own statement timeout before hanging up: a
# server that is alive cancels the statement itself first, with its own error.
GRACE_S = 5.0


class NoAnswer(psycopg2.OperationalError):
    """The server did not answer within the statement timeout; the connection is closed."""


class _Watcher:
    """Deadlines of the calls now waiting for a server, and the thread that enforces them."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._due: dict[int, tuple[float, int]] = {}  # call key -> (deadline, socket fd)
        self._hung_up: set[int] = set()
        self._thread: threading.Thread | None = None

    def arm(self, key: int, fd: int, seconds: float) -> None:
        with self._changed:
            self._due[key] = (time.monotonic() + seconds, fd)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="scalebench-pg-watch", daemon=True
                )
                self._thread.start()
            self._changed.notify()

    def disarm(self, key: int) -> bool:
        """Stop watching ``key``; whether its connection was hung up on."""
        with self._changed:
            self._due.pop(key, None)
            if key in self._hung_up:
                self._hung_up.discard(key)
                return True
            return False

    def _run(self) -> None:
        with self._changed:
            while True:
                now = time.monotonic()
                for key, (deadline, fd) in list(self._due.items()):
                    if deadline <= now:
                        del self._due[key]
                        _hang_up(fd)
                        self._hung_up.add(key)
                soonest = min((deadline for deadline, _ in self._due.values()), default=None)
                self._changed.wait(None if soonest is None else soonest - now)


_WATCHER = _Watcher()


def _hang_up(fd: int) -> None:
    """Shut down the socket behind ``fd``: a call blocked reading it returns at once. The
    descriptor itself stays open (libpq closes it when the connection is closed)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


class WatchedConnection(psycopg2.extensions.connection):
    """A psycopg2 connection whose every wait for the server is bounded (module docstring).
    ``timeout_s`` is the server's statement timeout, set by :func:`watched_connection`."""

    timeout_s: float = 300.0

    def cursor(  # type: ignore[override]
        self,
        name: str | None = None,
        cursor_factory: type[psycopg2.extensions.cursor] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> psycopg2.extensions.cursor:
        """A cursor of the kind asked for (psycopg2's own helpers ask for plain ones), made
        watched."""
        factory = cursor_factory or self.cursor_factory or psycopg2.extensions.cursor
        return super().cursor(name, _watched(factory), *args, **kwargs)

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Watch one call that waits for the server; :class:`NoAnswer` if it was hung up."""
        key = id(self)
        _WATCHER.arm(key, self.fileno(), self.timeout_s + GRACE_S)
        try:
            yield
        except psycopg2.Error as exc:
            if _WATCHER.disarm(key):
                raise NoAnswer(
                    f"no answer from the server within the statement timeout: "
                    f"{self.timeout_s:g} s (SCALEBENCH_STATEMENT_TIMEOUT_S sets another)"
                ) from exc
            raise
        finally:
            _WATCHER.disarm(key)

    def commit(self) -> None:
        with self.answering():
            super().commit()

    def rollback(self) -> None:
        with self.answering():
            super().rollback()


class WatchedCursor(psycopg2.extensions.cursor):
    """A cursor of a :class:`WatchedConnection`: its calls to the server are watched."""

    connection: WatchedConnection

    def execute(self, query: Any, vars: Any = None) -> None:
        with self.connection.answering():
            super().execute(query, vars)

    def executemany(self, query: Any, vars_list: Any) -> None:
        with self.connection.answering():
            super().executemany(query, vars_list)

    def copy_expert(self, sql: Any, file: Any, size: int = 8192) -> None:
        with self.connection.answering():
            super().copy_expert(sql, file, size)


@functools.cache
def _watched(factory: type[psycopg2.extensions.cursor]) -> type[psycopg2.extensions.cursor]:
    """``factory``'s cursors, their calls to the server watched."""
    if issubclass(factory, WatchedCursor):
        return factory
    return type(f"Watched{factory.__name__}", (WatchedCursor, factory), {})


def watched_connection(timeout_s: float) -> type[WatchedConnection]:
    """The connection class to hand psycopg2 (``connection_factory``) for statements of at
    most ``timeout_s`` seconds."""
    return type("WatchedConnection", (WatchedConnection,), {"timeout_s": timeout_s})
