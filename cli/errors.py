"""How the command line refuses what it is given and reports what failed, in one line.

An empty place (:data:`PLACE_OPTIONS`) is refused by name before anything runs; a file or
folder that cannot be used is said in one line (:func:`path_problem`); a traceback is
shown only when asked for (:func:`debugging`).
"""

from __future__ import annotations

import argparse
import errno
import os

from scalebench.config import location_problem, shown_location
from scalebench.request_fields import InvalidParameter


def path_problem(exc: BaseException) -> str | None:
    """One line for a file or folder that cannot be read or written, or None."""
    if not isinstance(exc, OSError) or not exc.filename or exc.errno not in PATH_ERRORS:
        return None
    return (
        f"cannot use {exc.filename}: {exc.strerror}; choose a folder you can read and "
        "write (--results or SCALEBENCH_RESULTS_URI for results, --out for exports, "
        "--data-dir or SCALEBENCH_DATA_DIR for data sets) or fix its permissions"
    )


PATH_ERRORS = {
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.ENOSPC,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EDQUOT,
    errno.ENAMETOOLONG,
    errno.EEXIST,  # e.g. --out is a link to nothing: there is something, and not a folder
    errno.ELOOP,
}


# Options and arguments that name a place (a file, a folder, a database, a sweep): empty is
# never meant (it would fall back to a default, or mean the current folder), so it is
# refused by name. Arguments (no leading dashes) have no default to fall back to.
PLACE_OPTIONS = {
    "results": "--results",
    "database": "--database",
    "out": "--out",
    "location": "location",
    "file": "file",
    "sweep": "sweep",
}


def refuse_empty_places(args: argparse.Namespace) -> None:
    """Raise :class:`InvalidParameter` for a place of :data:`PLACE_OPTIONS` given empty, or
    with white space at either end or a control character (a line end pasted with it), which
    would name another file or folder than the one meant (the rule of the settings,
    :func:`scalebench.config.location_problem`)."""
    places = dict(PLACE_OPTIONS)
    if args.command == "data":  # ``run``'s --data-dir is a request field, checked with it
        places["data_dir"] = "--data-dir"
    for name, shown in places.items():
        value = getattr(args, name, None)
        if value is not None and str(value).strip():
            problem = location_problem(str(value))
            if problem is not None:
                raise InvalidParameter(
                    name,
                    f"{shown} {shown_location(str(value))} {problem}, which would name another "
                    "place than the one meant; give it without",
                )
        if value is None or str(value).strip():
            continue
        if shown.startswith("--"):
            raise InvalidParameter(
                name, f"{shown} is empty; name one, or leave it out for the default"
            )
        raise InvalidParameter(name, f"the {shown} is empty; name one")


def debugging(args: argparse.Namespace | None = None) -> bool:
    """Whether a traceback is wanted (``--debug`` or ``SCALEBENCH_DEBUG=1``)."""
    return bool(getattr(args, "debug", False)) or os.environ.get("SCALEBENCH_DEBUG") == "1"
