"""What preparing a data set reports, and the stamp that spares checking it again.

:class:`Prepared` is :func:`workers.data.prepare.prepare`'s answer. A set checked
whole gets a stamp (:data:`STAMP`, JSON in its folder) with each file's size and
modification time (:func:`file_state`); while the stamp still matches the files the
set is *fresh* and nothing is hashed again. A stamp is written whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.data.atomic import replaced_when_done

STAMP = ".scalebench-verified.json"


@dataclass
class Prepared:
    """What :func:`~workers.data.prepare.prepare` found: ``status`` is ``fresh`` (stamp still
    valid), ``verified`` (checked now) or ``downloaded`` (fetched, then checked)."""

    name: str
    status: str
    location: str
    files: dict[str, str] = field(default_factory=dict)  # file name -> MD5
    bytes: int = 0


def write_stamp(path: Path, data: dict[str, Any]) -> None:
    """Write a stamp whole or not at all: a stamp cut short must never read as fresh."""
    with replaced_when_done(path) as partial:
        partial.write_text(json.dumps(data, indent=1), encoding="utf-8")


def read_stamp(path: Path) -> dict[str, Any]:
    """A stamp's content; ``{}`` (not fresh: check again) when it cannot be read."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def md5_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_state(path: Path) -> dict[str, int]:
    """A file's size (bytes) and modification time (ns), as a stamp keeps them."""
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
