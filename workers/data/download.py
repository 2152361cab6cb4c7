"""Downloading a data set's file: progress said about every 10 %, and a size limit so that a
wrong source cannot fill the disk.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from scalebench.datasets import DataSetCorrupt, DataSetMissing

# How much more than the expected size a download may be before it is stopped: a source
# that never ends (a wrong mirror, ``file:///dev/zero``) must not fill the disk.
DOWNLOAD_MARGIN = 0.10


def fetch(
    url: str,
    target: Path,
    say: Callable[[str], None] = print,
    expected_bytes: int | None = None,
    max_bytes: int | None = None,
) -> None:
    """Download ``url`` into ``target``, saying how far it got about every 10 %.

    Raises :class:`DataSetMissing` naming the address when it cannot be fetched
    (no network, a wrong mirror, a server error), and :class:`DataSetCorrupt` when it
    goes on past ``expected_bytes`` plus :data:`DOWNLOAD_MARGIN`, or past ``max_bytes``
    for a file whose exact size is not known (what was written is left for the caller's
    scratch folder to remove).
    """
    started = time.monotonic()
    said = 0
    limit = max_bytes
    if expected_bytes is not None:
        limit = int(expected_bytes * (1 + DOWNLOAD_MARGIN))
    try:
        with urllib.request.urlopen(url) as response, target.open("wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or expected_bytes or 0
            done = 0
            while chunk := response.read(1 << 20):
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
                    left = elapsed / fraction * (1 - fraction)
                    say(
                        f"{target.name}: {fraction:.0%} of {total / 1e6:.0f} MB, "
                        f"{elapsed:.0f} s elapsed, about {left:.0f} s to go"
                    )
    except DataSetCorrupt:
        raise
    except (OSError, ValueError) as exc:  # URLError and HTTPError are OSErrors
        raise DataSetMissing(f"could not download {url}: {exc}") from None
