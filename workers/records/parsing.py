"""One line to one record: :func:`parse_line`, with step records (the bulk of every rank
file) decoded and checked in one go as a :class:`StepRecord`, the other kinds as checked
dicts.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import orjson

from scalebench import quantities
from workers.records.schema import (
    FIRST_VERSION_WITH_PACKING,
    INT4_MAX,
    MAX_RECORD_S,
    PHASE_SET,
    PHASES_BEFORE_PACKING,
    READABLE_VERSIONS,
    BadRecord,
)
from workers.records.validation import validate_record

Counter = Annotated[int, msgspec.Meta(ge=0, le=INT4_MAX)]
# A step's loss and learning rate (scalebench.quantities): never negative.
NonNegative = Annotated[float, msgspec.Meta(ge=0)]


class StepRecord(msgspec.Struct, tag_field="kind", tag="step"):
    """A ``step`` record as read back: the bulk of every rank file.

    Step lines are decoded and type-checked in one go by ``msgspec`` (the
    other kinds, a few lines per file, become plain dicts). It reads like
    a dict too (``record["loss"]``, ``record.get("lr")``), so code and tests
    need not care which kind they hold.
    """

    v: int
    run_id: str
    rank: Counter
    world_size: Counter
    t: float
    epoch: Counter
    step: Counter
    samples: Counter
    phases: dict[str, float]
    loss: NonNegative | None = None
    lr: NonNegative | None = None

    def __getitem__(self, key: str) -> Any:
        if key == "kind":
            return "step"
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


_decode_step = msgspec.json.Decoder(StepRecord).decode


def parse_line(line: str | bytes) -> dict[str, Any] | StepRecord:
    """One record from one line, or :class:`BadRecord` saying what is wrong with it."""
    if (b"\\u0000" if isinstance(line, bytes) else "\\u0000") in line:
        # SQLite would store it and PostgreSQL refuse the run: neither does.
        raise BadRecord("it holds a NUL character (\\u0000), which PostgreSQL cannot store")
    marker = b'"step"' if isinstance(line, bytes) else '"step"'
    if marker in line:  # most likely a step record: the fast path
        try:
            record = _decode_step(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            pass  # not a step, or a bad one: the slow path says which
        else:
            if record.v < FIRST_VERSION_WITH_PACKING and record.phases.keys() >= (
                PHASES_BEFORE_PACKING
            ):
                record.phases.setdefault("gradient_packing", 0.0)
            if (
                record.v in READABLE_VERSIONS
                and record.phases.keys() == PHASE_SET
                and 0 <= record.t <= MAX_RECORD_S
                and record.rank < record.world_size <= quantities.MAX_WORLD_SIZE
                and min(record.phases.values()) >= 0
                and max(record.phases.values()) <= MAX_RECORD_S
            ):
                return record
    try:
        parsed = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadRecord(f"not JSON: {exc}") from None
    valid = validate_record(parsed)
    if valid["kind"] == "step":
        try:
            return msgspec.convert(valid, StepRecord)
        except msgspec.ValidationError as exc:
            raise BadRecord(f"step record: {exc}") from None
    return valid
