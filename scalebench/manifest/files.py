"""A sweep's two files on disk: written whole or not at all, and readable after a full disk.

:func:`create` writes a new sweep's ``sweep.json`` and sets aside its reserve of disk
space (:data:`RESERVE_BYTES` in ``.space-reserve``); :func:`append_verdicts` appends
lines to ``verdicts.jsonl``; :func:`finish` folds them into ``sweep.json`` again. A write
that meets a full filesystem frees the reserve and is tried once more. :func:`load` (a
local folder) and :func:`read` (any fsspec filesystem) read a sweep back, refusing with
:class:`~scalebench.manifest.contents.BadManifest` what is no sweep's.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scalebench import folders
from scalebench.diskspace import no_space
from scalebench.manifest.contents import MANIFEST, VERDICTS, BadManifest, Manifest
from scalebench.statuses import GROUP_STATUSES

RESERVE = ".space-reserve"  # freed for the verdicts and sweep.json when the disk fills
RESERVE_BYTES = 32 * 1024  # a few hundred verdict lines, or the final sweep.json of any sweep


def create(sweep_dir: Path, manifest: Manifest) -> None:
    """Write a new sweep's plan (the directory is created when missing) and set aside its
    reserve of disk space; a filesystem without room for both raises ``ENOSPC`` naming the
    sweep's folder, and nothing of the sweep is left."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    try:
        _write_atomically(sweep_dir / MANIFEST, manifest.to_json())
        _reserve_space(sweep_dir / RESERVE)
    except OSError as exc:
        if not no_space(exc):
            raise
        (sweep_dir / MANIFEST).unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            sweep_dir.rmdir()
        raise OSError(exc.errno, exc.strerror, str(sweep_dir)) from None


def _reserve_space(path: Path) -> None:
    """Write :data:`RESERVE_BYTES` of zeros to ``path`` (real blocks, not a sparse file)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | folders.NO_FOLLOW, 0o666)
        with os.fdopen(fd, "wb") as handle:
            handle.write(bytes(RESERVE_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        path.unlink(missing_ok=True)
        raise


def _making_room(sweep_dir: Path, write: Callable[[], None]) -> None:
    """``write()``; when the filesystem is full, free the sweep's reserve and try once more."""
    try:
        write()
    except OSError as exc:
        reserve = sweep_dir / RESERVE
        if not no_space(exc) or not reserve.exists():
            raise
        reserve.unlink()
        write()


def load(sweep_dir: Path) -> Manifest:
    """The manifest of the sweep at ``sweep_dir`` (a local directory), verdicts folded in;
    :class:`~scalebench.manifest.contents.BadManifest` when it cannot be read."""
    path = sweep_dir / MANIFEST
    with _reading(path):
        verdicts = sweep_dir / VERDICTS
        for where in (path, verdicts):
            _regular(where, where.is_file(), os.path.lexists(where))
            _inside(str(sweep_dir), str(where))
        data = parse(path.read_text(encoding="utf-8"))
        lines = verdicts.read_text(encoding="utf-8").splitlines() if verdicts.is_file() else []
        return Manifest.from_json(data, lines)


def parse(text: str) -> Any:
    """``sweep.json``'s text as JSON, refusing what the two results databases would store
    differently or not at all: ``NaN`` and ``Infinity`` (JSON has no such numbers; SQLite keeps
    them, PostgreSQL's JSON refuses them) and the NUL character (PostgreSQL cannot store it)."""

    def no_constant(name: str) -> Any:
        raise BadManifest(f"{name} is no JSON number, and no results database stores it alike")

    data = json.loads(text, parse_constant=no_constant)
    if "\x00" in text or "\\u0000" in text.lower():
        raise BadManifest("it holds a NUL character (\\u0000), which PostgreSQL cannot store")
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadManifest(
            "it holds half of a UTF-16 surrogate pair (such as \\ud800), which is no text "
            "either database stores"
        ) from None
    return data


def _regular(path: Any, is_file: bool, exists: bool) -> None:
    """Refuse a manifest or verdicts file that is there but no regular file (a device, a pipe,
    a link to one or to nothing): read, it would never end or wait for ever for a writer."""
    if exists and not is_file:
        raise BadManifest(
            f"{str(path).rsplit('/', 1)[-1]} is not a regular file (a folder, a device, a pipe, "
            "or a link to one or to nothing), so the sweep is not read"
        )


@contextlib.contextmanager
def _reading(path: Any) -> Iterator[None]:
    """Turn what a damaged ``sweep.json`` raises into one :class:`BadManifest` naming it."""
    try:
        yield
    except BadManifest as exc:
        raise BadManifest(f"{path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise BadManifest(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except UnicodeDecodeError:
        raise BadManifest(f"{path}: not UTF-8 text") from None
    except IsADirectoryError:
        raise BadManifest(f"{path}: a directory, not a file") from None
    except RecursionError:  # the json module's parser recurses once per nested list or object
        raise BadManifest(f"{path}: not JSON (nested deeper than it can be read)") from None
    except PermissionError as exc:  # the sweeps beside it are still read
        raise BadManifest(f"{path}: cannot be read ({exc.strerror})") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise BadManifest(f"{path}: not a sweep manifest ({type(exc).__name__}: {exc})") from None


def _inside(sweep_dir: str, path: str, fs: Any = None) -> None:
    """Refuse a manifest or verdicts file that is a link leading out of its sweep's folder."""
    try:
        folders.check_inside(sweep_dir, path, fs)
    except folders.LinkLeaves as exc:
        raise BadManifest(str(exc)) from None


def read(fs: Any, sweep_path: str) -> Manifest:
    """:func:`load` through an fsspec filesystem (any results location ingest reads)."""
    with _reading(f"{sweep_path}/{MANIFEST}"):
        for name in (MANIFEST, VERDICTS):
            where = f"{sweep_path}/{name}"
            _regular(where, fs.isfile(where), folders.lexists(fs, where))
            _inside(sweep_path, where, fs)
        with fs.open(f"{sweep_path}/{MANIFEST}", "r", encoding="utf-8") as handle:
            data = parse(handle.read())
        lines: list[str] = []
        if fs.exists(f"{sweep_path}/{VERDICTS}"):
            with fs.open(f"{sweep_path}/{VERDICTS}", "r", encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        return Manifest.from_json(data, lines)


def finish(sweep_dir: Path) -> Manifest:
    """Fold the verdicts into ``sweep.json`` with the finishing time; return the result."""
    done = replace(load(sweep_dir), finished_at=datetime.now(UTC).isoformat())
    _making_room(sweep_dir, lambda: _write_atomically(sweep_dir / MANIFEST, done.to_json()))
    (sweep_dir / VERDICTS).unlink(missing_ok=True)  # folded: reading it again changes nothing
    (sweep_dir / RESERVE).unlink(missing_ok=True)  # nothing more is written
    return done


def append_verdicts(sweep_dir: Path, verdicts: list[dict[str, Any]]) -> None:
    """Append ``verdicts`` to the sweep's ``verdicts.jsonl`` as one whole write (nothing for
    none); a status that is no group's raises ``ValueError`` before anything is written."""
    if not verdicts:
        return
    for verdict in verdicts:
        if verdict["status"] not in GROUP_STATUSES:
            raise ValueError(f"unknown group status {verdict['status']!r}")
    data = "".join(json.dumps(v) + "\n" for v in verdicts).encode()
    _making_room(sweep_dir, lambda: _append_whole(sweep_dir / VERDICTS, data))


def _append_whole(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and flush it to disk; on an error (a full disk) cut off
    what part of it was written, so the file ends as it did. A link in ``path``'s place is
    refused (ELOOP), never written through."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | folders.NO_FOLLOW, 0o666)
    try:
        size = os.fstat(fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: dict[str, Any]) -> None:
    """Readers never see half a file, and a crash leaves the old file or the new one: write
    a temporary file of this writer's own beside ``path``, flush it to disk, rename it over."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # Created as any new file is (the umask applies), so others of the group may read it.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=1, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
