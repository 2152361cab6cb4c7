"""Errors in words: what a refusal says about an exception, never the exception's repr.

A message that reaches a person (the command line's one line, an ingest report, an
Airflow task's log) says what went wrong in a sentence: ``cannot read rank-0.jsonl: Is a
directory``, not ``IsADirectoryError(21, 'Is a directory')``.
"""

from __future__ import annotations

from pathlib import PurePath


def describe(exc: BaseException) -> str:
    """``exc`` as a short sentence: for a file system error, what could not be done and
    the path; for a database error, the driver's first line; otherwise the message, or
    the kind of error when it has none."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f" {PurePath(exc.filename).name}" if exc.filename else ""
        return f"cannot read{where}: {exc.strerror}"
    orig = getattr(exc, "orig", None)  # a database driver's error, wrapped by SQLAlchemy
    text = str(orig if orig is not None else exc).strip()
    first = text.splitlines()[0] if text else ""
    return first or f"an unexpected {type(exc).__name__} with no message"
