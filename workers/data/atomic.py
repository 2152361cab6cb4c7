"""Files that appear whole or not at all.

A data set converted or unpacked in place can be cut short (a corrupt archive,
a full disk, a killed process) and then look finished to the next run. So
every output is written under a temporary name beside its final one and
renamed into place only once it is complete and checked; a failure removes
the temporary file and leaves the final name as it was.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def temporary_name(path: Path) -> Path:
    """A hidden name beside ``path`` with the same suffix (``np.save`` keeps ``.npy``)."""
    return path.with_name(f".{path.stem}.partial{path.suffix}")


@contextmanager
def replaced_when_done(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``path``, on failure it
    is removed."""
    temporary = temporary_name(path)
    try:
        yield temporary
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    os.replace(temporary, path)
