"""Giving up on a PostgreSQL server that stops answering.

A slow server ends a slow statement itself: every connection sets its ``statement_timeout``
to :func:`scalebench.config.statement_timeout_s`. A server that never answers at all (hung,
or a proxy holding the connection open) ends nothing, and libpq has no client-side limit on
a query, so psycopg2 would wait forever. Each call that waits for the server (``execute``,
``executemany``, a COPY, ``commit``, ``rollback``, a server-side cursor's fetches) is
therefore watched, one by one (ingest's COPY thread shares its connection): when the server
has said nothing :data:`GRACE_S` seconds after its own timeout should have ended the
statement, the connection's socket is shut down, the call fails at once, and the error
(:class:`NoAnswer`) names the timeout.

A stop signal (Ctrl-C, SIGTERM, SIGHUP) stops such a wait at once too. libpq retries a wait
that a signal interrupts, and Python runs a signal's handler only once the call returns, so
on its own a Ctrl-C would wait for the deadline. While the main thread waits, the stop
signals' Python handlers are therefore swapped for ones that only note the signal, and
Python's wakeup descriptor (:func:`signal.set_wakeup_fd`) tells the watcher, which hangs up
every waiting call; once the call has returned, the noted signal's own handler runs
(``KeyboardInterrupt`` for Ctrl-C). Noting the signal first keeps the handler from running
inside psycopg2's own error handling, which prints its exception and drops it.

One watcher thread per process serves every watched connection; it sleeps until the
earliest deadline or a signal, and is idle while nothing waits.

A wait callback (:func:`psycopg2.extensions.set_wait_callback`) would bound every wait
without a thread, but it is one setting for the whole process, and psycopg2 refuses COPY
while one is set: ingest loads its large tables with COPY.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.extensions

# Seconds the watcher waits past the server's own statement timeout before hanging up: a
# server that is alive cancels the statement itself first, with its own error.
GRACE_S = 5.0

# Seconds a call made while the process stops (Ctrl-C, SIGTERM) waits for the server: it
# only cleans up (an unlock, a rollback), which a server that answers does at once.
STOPPING_WAIT_S = 1.0


class NoAnswer(psycopg2.OperationalError):
    """The server did not answer within the statement timeout; the connection is closed."""


class Interrupted(NoAnswer):
    """A stop signal came while the call waited for the server; the connection is closed.
    The signal's own handler runs after it (``KeyboardInterrupt`` for Ctrl-C)."""


# The signals that stop a scalebench process (the command line turns SIGTERM and SIGHUP
# into what Ctrl-C does), and so end a wait for the server at once.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# What :meth:`_Watcher.disarm` says of a call hung up at its deadline (a stop signal: the
# signal's name).
TIMED_OUT = "timed out"


class _Watcher:
    """Deadlines of the calls now waiting for a server, and the thread that enforces them
    and hangs them all up on a stop signal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[int, tuple[float, int]] = {}  # call key -> (deadline, socket fd)
        self._hung_up: dict[int, str] = {}  # call key -> why (TIMED_OUT or a signal's name)
        self._thread: threading.Thread | None = None
        self._poke: tuple[socket.socket, socket.socket] | None = None  # wakes the thread
        self._signals: tuple[socket.socket, socket.socket] | None = None  # set_wakeup_fd's
        self._wakes_at: float | None = None  # when the thread looks at deadlines next

    def _start(self) -> None:
        """The thread and its two socket pairs, once (called with the lock held)."""
        if self._thread is not None:
            return
        self._poke, self._signals = socket.socketpair(), socket.socketpair()
        for pair in (self._poke, self._signals):
            for end in pair:
                end.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="scalebench-pg-watch", daemon=True)
        self._thread.start()

    def signal_fd(self) -> int:
        """The descriptor to hand :func:`signal.set_wakeup_fd` (the thread reads it)."""
        with self._lock:
            self._start()
            assert self._signals is not None
            return self._signals[1].fileno()

    def arm(self, key: int, fd: int, seconds: float) -> None:
        with self._lock:
            deadline = time.monotonic() + seconds
            self._due[key] = (deadline, fd)
            self._start()
            assert self._poke is not None
            if self._wakes_at is None or deadline < self._wakes_at:  # else it wakes in time
                with contextlib.suppress(BlockingIOError):  # full: the thread has pokes to read
                    self._poke[1].send(b"\0")

    def disarm(self, key: int) -> str | None:
        """Stop watching ``key``; why its connection was hung up on (:data:`TIMED_OUT`, or
        the stop signal's name), or None if it was not."""
        with self._lock:
            self._due.pop(key, None)
            return self._hung_up.pop(key, None)

    def _run(self) -> None:
        assert self._poke is not None and self._signals is not None
        poke, signals = self._poke[0], self._signals[0]
        while True:
            with self._lock:
                now = time.monotonic()
                for key, (deadline, fd) in list(self._due.items()):
                    if deadline <= now:
                        self._end(key, fd, TIMED_OUT)
                soonest = min((deadline for deadline, _ in self._due.values()), default=None)
                self._wakes_at = soonest
            wait = None if soonest is None else max(0.0, soonest - now)
            readable = select.select([poke, signals], [], [], wait)[0]
            if poke in readable:
                _drain(poke)
            if signals in readable:
                stops = [n for n in _drain(signals) if n in STOP_SIGNALS]
                if stops:
                    self.hang_up_all(signal.Signals(stops[0]).name)

    def hang_up_all(self, why: str) -> None:
        """Hang up every call now waiting, saying ``why``."""
        with self._lock:
            for key, (_, fd) in list(self._due.items()):
                self._end(key, fd, why)

    def _end(self, key: int, fd: int, why: str) -> None:
        """Hang up the call ``key`` (called with the lock held)."""
        del self._due[key]
        _hang_up(fd)
        self._hung_up[key] = why


_WATCHER = _Watcher()
_CALLS = itertools.count()  # the watcher's keys, one per call


def _drain(sock: socket.socket) -> bytes:
    """Every byte ``sock`` (non-blocking) holds now."""
    got = b""
    try:
        while chunk := sock.recv(4096):
            got += chunk
    except BlockingIOError:
        pass
    return got


def hang_up_waiting(why: str) -> None:
    """Hang up every call of this process now waiting for a server (a stop already in hand:
    its calls on other threads are not to be waited for); each fails with
    :class:`Interrupted` saying ``why``."""
    _WATCHER.hang_up_all(why)


@contextmanager
def stops_hang_up() -> Iterator[list[int]]:
    """On the main thread: while the body runs, a stop signal is only noted (in the list
    yielded) and the watcher told, which hangs up every waiting call; the noted signal's
    own handler runs at the end. Besides the calls themselves, a wait for another thread's
    call uses it (ingest's COPY). Elsewhere (a signal's handler runs on the main thread
    only), or where the stop signals have no Python handler or another wakeup descriptor
    is set (an event loop's), nothing changes."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    handlers: dict[int, Callable[[int, Any], Any]] = {}
    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if callable(handler):
            handlers[signum] = handler
    previous = signal.set_wakeup_fd(_WATCHER.signal_fd(), warn_on_full_buffer=False)
    if not handlers or previous != -1:
        signal.set_wakeup_fd(previous)
        yield received
        return
    for signum in handlers:
        signal.signal(signum, lambda signum, _frame: received.append(signum))
    try:
        yield received
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(-1)
        for signum in dict.fromkeys(received):
            handlers[signum](signum, None)


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
    hung_up: str | None = None  # why a call of this connection was hung up on, if one was

    def cursor(  # type: ignore[override]
        self,
        name: str | None = None,
        cursor_factory: type[psycopg2.extensions.cursor] | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> psycopg2.extensions.cursor:
        """A cursor of the kind asked for (psycopg2's own helpers ask for plain ones), made
        watched; a named (server-side) one's fetches are watched too."""
        factory = cursor_factory or self.cursor_factory or psycopg2.extensions.cursor
        return super().cursor(name, _watched(factory, name is not None), *args, **kwargs)

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Watch one call that waits for the server: :class:`NoAnswer` if it was hung up at
        its deadline, :class:`Interrupted` (then the signal's own handler) if on a stop
        signal. A call made while a stop (``KeyboardInterrupt``, the command line's SIGTERM
        included) unwinds, to clean up (an unlock, a rollback), waits
        :data:`STOPPING_WAIT_S` at most, and if hung up the stop goes on unwinding. A call
        on a closed connection is not watched: it fails at once."""
        if self.closed:
            yield
            return
        stop = sys.exception()  # a call made while a stop unwinds: cleaning up
        stop = stop if isinstance(stop, KeyboardInterrupt) else None
        key = next(_CALLS)  # two threads may share a connection (ingest's COPY)
        with stops_hang_up() as received:
            limit_s = STOPPING_WAIT_S if stop is not None else self.timeout_s + GRACE_S
            _WATCHER.arm(key, self.fileno(), limit_s)
            try:
                if received:  # a signal came before the call began: it is not made
                    raise Interrupted(
                        f"{signal.Signals(received[0]).name} before the statement was sent"
                    )
                yield
            except psycopg2.Error as exc:
                why = _WATCHER.disarm(key)
                if why is not None:
                    self.hung_up = why
                if why is not None and stop is not None:
                    # the stop goes on, as it was: the cleanup that could not finish is no news
                    raise stop  # noqa: B904
                if why == TIMED_OUT:
                    raise NoAnswer(
                        f"no answer from the server within the statement timeout: "
                        f"{self.timeout_s:g} s (SCALEBENCH_STATEMENT_TIMEOUT_S sets another)"
                    ) from exc
                if why is not None:
                    raise Interrupted(f"{why} while waiting for the server; hung up") from exc
                raise
            finally:
                _WATCHER.disarm(key)

    def commit(self) -> None:
        with self.answering():
            super().commit()

    def rollback(self) -> None:
        """Roll back; on a connection hung up on (:attr:`hung_up`), nothing: the server
        ended its transaction with the connection, and the error that hung it up, not
        "connection already closed", is the one to report."""
        if self.closed and self.hung_up is not None:
            return
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


class WatchedNamedCursor(WatchedCursor):
    """A named (server-side) cursor of a :class:`WatchedConnection`: besides its statement,
    each fetch and its closing wait for the server (``FETCH``, ``MOVE``, ``CLOSE``), and are
    watched. Iterating fetches ``itersize`` rows at a time, as psycopg2's own does."""

    def fetchone(self) -> Any:
        with self.connection.answering():
            return super().fetchone()

    def fetchmany(self, size: int | None = None) -> list[Any]:
        with self.connection.answering():
            return super().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> list[Any]:
        with self.connection.answering():
            return super().fetchall()

    def scroll(self, value: int, mode: str = "relative") -> None:
        with self.connection.answering():
            super().scroll(value, mode)

    def close(self) -> None:
        if self.closed or self.connection.closed:
            super().close()  # nothing is sent
            return
        with self.connection.answering():
            super().close()

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        while rows := self.fetchmany(self.itersize):
            yield from rows

    def __next__(self) -> Any:
        with self.connection.answering():
            return super().__next__()


@functools.cache
def _watched(
    factory: type[psycopg2.extensions.cursor], named: bool = False
) -> type[psycopg2.extensions.cursor]:
    """``factory``'s cursors, their calls to the server watched (``named``: a server-side
    cursor's, its fetches included)."""
    watched = WatchedNamedCursor if named else WatchedCursor
    if issubclass(factory, watched):
        return factory
    return type(f"Watched{factory.__name__}", (watched, factory), {})


def watched_connection(timeout_s: float) -> type[WatchedConnection]:
    """The connection class to hand psycopg2 (``connection_factory``) for statements of at
    most ``timeout_s`` seconds."""
    return type("WatchedConnection", (WatchedConnection,), {"timeout_s": timeout_s})
