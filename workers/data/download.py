"""Downloading a data set's file: resumed where an earlier try stopped, progress said about
every 10 % with the time left, and a size limit so that a wrong source cannot fill the disk.
"""

from __future__ import annotations

import http.client
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.error import HTTPError

from scalebench.datasets import DataSetCorrupt, DataSetMissing

# How much more than the expected size a download may be before it is stopped: a source
# that never ends (a wrong mirror, ``file:///dev/zero``) must not fill the disk.
DOWNLOAD_MARGIN = 0.10
# How often a connection that drops mid-file is opened again, each time from where it stopped.
RESUMES = 3
TIMEOUT_S = 60.0  # seconds without a byte before a connection counts as dropped
CHUNK_BYTES = 1 << 20


class DownloadCut(DataSetMissing):
    """The connection dropped mid-file: what arrived is kept, and the next try resumes it."""


def _open(url: str, start: int) -> tuple[object, int, int | None]:
    """(response, the byte it starts at, the whole file's bytes when the server says)."""
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT_S)
    except HTTPError as exc:
        if exc.code == 416 and start:  # nothing past ``start``: the file is already whole
            return None, start, start
        raise
    length = int(response.headers.get("Content-Length") or 0) or None
    if start and getattr(response, "status", 200) == 206:
        whole = response.headers.get("Content-Range", "").rpartition("/")[2]
        return response, start, int(whole) if whole.isdigit() else None
    return response, 0, length  # the server sent the whole file again (no ranges)


def fetch(
    url: str,
    target: Path,
    say: Callable[[str], None] = print,
    expected_bytes: int | None = None,
    max_bytes: int | None = None,
    *,
    resume: bool = False,
) -> None:
    """Download ``url`` into ``target``, saying how far it got about every 10 %.

    With ``resume``, bytes already in ``target`` are kept and only the rest is asked for
    (an HTTP ``Range`` request; a server that ignores it sends the whole file, which then
    replaces them), and a connection that drops mid-file is opened again from where it
    stopped, up to :data:`RESUMES` times; when it still fails, :class:`DownloadCut` says so
    and ``target`` keeps what arrived, for the next call to resume.

    Raises :class:`DataSetMissing` naming the address when it cannot be fetched
    (no network, a wrong mirror, a server error), and :class:`DataSetCorrupt` when it
    goes on past ``expected_bytes`` plus :data:`DOWNLOAD_MARGIN`, or past ``max_bytes``
    for a file whose exact size is not known (what was written is left for the caller's
    scratch folder to remove).
    """
    limit = max_bytes
    if expected_bytes is not None:
        limit = int(expected_bytes * (1 + DOWNLOAD_MARGIN))
    started = time.monotonic()
    tries = 0
    while True:
        have = target.stat().st_size if resume and target.is_file() else 0
        try:
            _receive(url, target, have, limit, expected_bytes, started, say)
            return
        except DataSetCorrupt:
            raise
        # URLError and HTTPError are OSErrors; a body cut short is an HTTPException
        except (OSError, ValueError, http.client.HTTPException) as exc:
            if isinstance(exc, OSError) and exc.errno is not None and not _network(exc):
                raise  # the disk (full, read-only): the caller names it
            got = target.stat().st_size if target.is_file() else 0
            if not resume or got <= have or tries >= RESUMES:
                cut = resume and got > 0
                kind = DownloadCut if cut else DataSetMissing
                where = f"; {got:,} bytes kept, the next try resumes there" if cut else ""
                raise kind(f"could not download {url}: {exc}{where}") from None
            tries += 1
            say(f"{target.name}: the connection dropped at {got:,} bytes; resuming")


def _network(exc: OSError) -> bool:
    """Whether an ``OSError`` with an errno comes from the connection, not from the disk."""
    import errno

    return exc.errno in {
        errno.ECONNRESET,
        errno.ECONNREFUSED,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.EPIPE,
    }


def _receive(
    url: str,
    target: Path,
    have: int,
    limit: int | None,
    expected_bytes: int | None,
    started: float,
    say: Callable[[str], None],
) -> None:
    response, start, whole = _open(url, have)
    if response is None:
        return
    total = whole or expected_bytes or 0
    said = int(min(1.0, start / total) * 10) if total else 0
    done = start
    with response, target.open("ab" if start else "wb") as out:  # type: ignore[attr-defined]
        while chunk := response.read(CHUNK_BYTES):  # type: ignore[attr-defined]
            done += len(chunk)
            if limit is not None and done > limit:
                size = (
                    f"the file is {expected_bytes:,}"
                    if expected_bytes is not None
                    else "no such file can be larger"
                )
                raise DataSetCorrupt(
                    f"{url}: more than {limit:,} bytes, where {size}; stopped (a wrong "
                    "address, or a source that never ends)"
                )
            out.write(chunk)
            fraction = min(1.0, done / total) if total else 0.0
            if fraction * 10 >= said + 1:
                said = int(fraction * 10)
                elapsed = time.monotonic() - started
                rate = (done - start) / max(elapsed, 1e-9)
                left = (total - done) / max(rate, 1e-9)
                say(
                    f"{target.name}: {fraction:.0%} of {total / 1e6:.0f} MB, "
                    f"{elapsed:.0f} s elapsed, about {left:.0f} s to go"
                )
    if whole is not None and done < whole:
        raise ConnectionResetError(f"the server closed the connection at {done:,} of {whole:,}")
