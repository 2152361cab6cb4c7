"""A full results filesystem, in one sentence that names it.

When the disk under a sweep fills up, the ranks, the launcher and the manifest
all meet ``ENOSPC`` (or ``EDQUOT``, a quota). Each says so with
:func:`no_space_reason` (``no space left on <mount point>``) instead of a
traceback, so the group is recorded ``failed`` with the real cause.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

NO_SPACE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT})
NO_SPACE = "no space left on "  # how every such reason begins


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` is a filesystem out of space (or over its quota)."""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRORS


def mount_point(path: Path | str) -> Path:
    """The mount point of the filesystem that holds ``path`` (its nearest existing
    ancestor when ``path`` does not exist yet)."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    while not os.path.ismount(here) and here != here.parent:
        here = here.parent
    return here


def no_space_reason(path: Path | str) -> str:
    """``no space left on <mount point of path>``: the reason recorded for a group, and the
    line printed, when the filesystem under ``path`` is full."""
    return f"{NO_SPACE}{mount_point(path)}"
