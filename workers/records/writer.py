"""Writing one rank's records: :class:`RecordWriter` appends each record, checked, as one
whole line of ``rank-<r>.jsonl``, non-finite numbers written as ``null``.
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from workers.records.schema import SCHEMA_VERSION, rank_file_name
from workers.records.validation import validate_record


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(v) for v in value]
    return value


class RecordWriter:
    """Appends one rank's records to ``<run_dir>/rank-<rank>.jsonl``.

    ``t`` is the record's time in seconds since the group's common start (the
    tracker's clock). Each record is flushed as soon as it is written.
    """

    def __init__(self, run_dir: Path, run_id: str, rank: int, world_size: int) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / rank_file_name(rank)
        self.run_id = run_id
        self.rank = rank
        self.world_size = world_size
        # Unbuffered: each record goes to the file whole in write(), or not at all.
        self._file: BinaryIO = self.path.open("ab", buffering=0)
        self._size = self._file.seek(0, os.SEEK_END)  # bytes of whole records so far

    def write(self, kind: str, t: float, **payload: Any) -> dict[str, Any]:
        record = {
            "v": SCHEMA_VERSION,
            "run_id": self.run_id,
            "rank": self.rank,
            "world_size": self.world_size,
            "kind": kind,
            "t": t,
            **_finite_or_none(payload),
        }
        validate_record(record)
        line = memoryview(orjson.dumps(record) + b"\n")
        try:
            written = 0
            while written < len(line):
                written += self._file.write(line[written:]) or 0
        except OSError:
            # A full disk can take part of a line: cut it off, so the file still ends
            # with a whole record and readers never see half of one.
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), self._size)
            raise
        self._size += len(line)
        return record

    def close(self) -> None:
        if not self._file.closed:
            os.fsync(self._file.fileno())
            self._file.close()
