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
    """``value`` with every float that is not finite replaced by ``None``, in dicts, lists and
    tuples too (a tuple becomes a list, as JSON has it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        # A finite float (most of a step record: its phases) is kept without a call:
        # ``v - v`` is 0 for every finite float, NaN for infinities and NaN.
        return {
            k: v if type(v) is float and v - v == 0.0 else _finite_or_none(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_finite_or_none(v) for v in value]
    return value


# Step records are written in batches: one write of at most STEP_BATCH lines, at the latest
# STEP_BATCH_S seconds (of the tracker's clock) after the steps last written, and the first
# step at once. Building, checking and writing a batch of records at a time keeps the step
# loop's own code and data in the processor's caches: light Task 2a's engine, whose steps take
# 0.7 ms on a 2-core AMD EPYC, went from 0.91 to about 0.96 of a plain loop's speed. Any other
# record, and close(), write the steps held first, so the file keeps their order.
STEP_BATCH = 16
STEP_BATCH_S = 0.5


class RecordWriter:
    """Appends one rank's records to ``<run_dir>/rank-<rank>.jsonl``.

    ``t`` is the record's time in seconds since the group's common start (the
    tracker's clock). Every record but a step's is written as soon as it is given; steps
    are held and written in batches (:data:`STEP_BATCH`), so a rank killed outright loses
    at most the last :data:`STEP_BATCH_S` seconds of steps (one that stops on SIGTERM or
    fails writes them with its last event). A record is checked when it is written: a bad
    step raises :class:`~workers.records.schema.BadRecord` from the write that writes its batch.
    """

    def __init__(self, run_dir: Path, run_id: str, rank: int, world_size: int) -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        self.path = run_dir / rank_file_name(rank)
        self.run_id = run_id
        self.rank = rank
        self.world_size = world_size
        # Unbuffered: each batch of whole records goes to the file in one write, or not at all.
        self._file: BinaryIO = self.path.open("ab", buffering=0)
        self._size = self._file.seek(0, os.SEEK_END)  # bytes of whole records so far
        self._steps: list[tuple[float, dict[str, Any]]] = []  # held: (t, payload)
        self._steps_written_t = -math.inf

    def write(self, kind: str, t: float, **payload: Any) -> None:
        """Write the record of ``kind`` at ``t`` with ``payload``'s fields (a step's: held
        until its batch is written; its payload must not change meanwhile)."""
        if kind == "step":
            self._steps.append((t, payload))
            if len(self._steps) >= STEP_BATCH or t - self._steps_written_t >= STEP_BATCH_S:
                self.flush()
            return
        self.flush()
        self._append(self._line(kind, t, payload))

    def flush(self) -> None:
        """Write the step records held, if any."""
        if not self._steps:
            return
        steps, self._steps = self._steps, []
        self._steps_written_t = steps[-1][0]
        self._append(b"".join(self._line("step", t, payload) for t, payload in steps))

    def _line(self, kind: str, t: float, payload: dict[str, Any]) -> bytes:
        """The record as one checked JSON line."""
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
        return orjson.dumps(record) + b"\n"

    def _append(self, lines: bytes) -> None:
        """Append whole ``lines`` to the file, or none of them."""
        data = memoryview(lines)
        try:
            written = 0
            while written < len(data):
                written += self._file.write(data[written:]) or 0
        except OSError:
            # A full disk can take part of a line: cut it off, so the file still ends
            # with a whole record and readers never see half of one.
            with contextlib.suppress(OSError):
                os.ftruncate(self._file.fileno(), self._size)
            raise
        self._size += len(data)

    def close(self) -> None:
        """Write the steps held, then sync and close the file."""
        if self._file.closed:
            return
        try:
            self.flush()
        finally:
            os.fsync(self._file.fileno())
            self._file.close()
