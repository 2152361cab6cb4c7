"""Reading and writing a sweep's folder without leaving it.

A results location is a path, never a pattern: folders are listed, not globbed, so
``exp[1]`` names the folder ``exp[1]`` and nothing else. Nothing under a sweep's folder is
read through a link that leads out of it (a rank file, a run folder or ``sweep.json``
linked to a file elsewhere is refused, naming the link), and the few files written there
are opened so that a link in their place is refused rather than followed
(:data:`NO_FOLLOW`). A link that stays inside the sweep's folder is read as its target.
"""

from __future__ import annotations

import errno
import os
from typing import Any

# Flags that make ``os.open`` refuse a link in the file's place (ELOOP) instead of writing
# through it to wherever it points.
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


def is_local(fs: Any) -> bool:
    """Whether ``fs`` (an fsspec filesystem) is this machine's: the only kind with links."""
    protocol = getattr(fs, "protocol", ())
    return "file" in (protocol if isinstance(protocol, tuple | list) else (protocol,))


def link_out(folder: str, path: str, fs: Any = None) -> str | None:
    """Where ``path`` really is, when reaching it from ``folder`` passes a link that leads
    out of ``folder`` (``None``: it stays inside, does not exist, or ``fs``, an fsspec
    filesystem, has no links; ``None`` for ``fs``: this machine's)."""
    if (fs is not None and not is_local(fs)) or not os.path.lexists(path):
        return None
    boundary = os.path.realpath(folder)
    real = os.path.realpath(path)
    if real == boundary or real.startswith(boundary.rstrip(os.sep) + os.sep):
        return None
    return real


class LinkLeaves(OSError):
    """A file or folder of a sweep is a link that leads out of the sweep's folder."""


def check_inside(folder: str, path: str, fs: Any = None) -> None:
    """Raise :class:`LinkLeaves` naming ``path`` when it leads out of ``folder`` (``fs`` as
    in :func:`link_out`)."""
    target = link_out(folder, path, fs)
    if target is not None:
        name = path.rstrip("/").rsplit("/", 1)[-1]
        raise LinkLeaves(
            f"{name} is a link that leaves the sweep's folder (to {target}), so it is not read"
        )


def names(fs: Any, folder: str) -> list[str]:
    """The names of ``folder``'s entries, listed, never globbed, sorted; none when
    ``folder`` does not exist or is no folder."""
    try:
        listed = fs.ls(folder, detail=False)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except NotImplementedError:  # e.g. data: URLs, which hold one file and no folders
        raise OSError(errno.EOPNOTSUPP, "its filesystem cannot list a folder", folder) from None
    return sorted(str(path).rstrip("/").rsplit("/", 1)[-1] for path in listed)


def lexists(fs: Any, path: str) -> bool:
    """Whether there is an entry at ``path``, a link to nothing included."""
    return bool(fs.lexists(path)) if hasattr(fs, "lexists") else bool(fs.exists(path))
