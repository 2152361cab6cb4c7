"""Metrics records: the JSON-lines contract between workers and everything else.

Each rank appends to its own file ``rank-<r>.jsonl`` in the run's directory and
flushes after every record, so a killed rank leaves every record it finished.
Every record carries:

- ``v``: schema version (:data:`SCHEMA_VERSION`; version 1 records, whose
  evaluation times were named ``eval_seconds``, ``train_seconds`` and
  ``wall_seconds``, are read with today's names; version 2 steps, see below);
- ``run_id``, ``rank``, ``world_size``;
- ``kind``: one of :data:`KINDS`;
- ``t``: seconds since the group's common start (taken right after a barrier).

and a payload by kind:

- ``step``: ``epoch``, ``step``, ``samples`` (this rank's), ``loss`` (mean over
  ranks, ``null`` when not finite), ``lr``, and ``phases``: seconds spent in
  ``data``, ``forward``, ``loss``, ``backward``, ``gradient_packing`` (copying
  the gradients into the all-reduce's buffer and back, and dividing them),
  ``communication`` (the collectives alone) and ``optimizer``. Steps of
  version 2 and older have no ``gradient_packing``: their ``communication``
  includes it, and they are read with 0 seconds of packing.
- ``eval``: ``epoch``, ``metrics`` (global values, e.g. ``top1_accuracy`` in
  percent and ``loss``), ``eval_s`` (this evaluation), ``train_s`` (wall time
  so far minus all evaluation time so far), ``wall_s``: the names of the
  results database's columns.
- ``allreduce``: ``bytes``, ``elements``, ``dtype``, ``backend``, ``seconds``
  (one entry per timed repetition, this rank's view).
- ``event``: ``event`` (``start``, ``goal_reached``, ``diverged``, ``finished``,
  ``failed``, ``switched_to_asgd``) plus free details (``reason``, ``status``...).
- ``env``: versions, devices, host.

Readers hold a record to what a measurement can be: a time ``t`` or a duration (a phase,
an evaluation, an all-reduce repetition) from 0 to :data:`MAX_RECORD_S` seconds, step
times that never go back within one attempt of a rank, lines of at most
:data:`MAX_LINE_BYTES` bytes, and rank files that are regular files (not a device, a pipe
or a link to one, which could be read for ever).

This module does not import torch: readers (ingest, the CLI) use it too.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import product
from operator import attrgetter, itemgetter
from pathlib import Path, PurePath, PurePosixPath
from typing import Annotated, Any, BinaryIO

import msgspec
import orjson

from scalebench import folders, quantities
from scalebench.request import MAX_GROUP_TIMEOUT_S

SCHEMA_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
# Fields renamed since version 1, by kind: {old name: new name}.
_RENAMED_SINCE_1 = {
    "eval": {"eval_seconds": "eval_s", "train_seconds": "train_s", "wall_seconds": "wall_s"},
}
KINDS = ("step", "eval", "allreduce", "event", "env")
PHASES = ("data", "forward", "loss", "backward", "gradient_packing", "communication", "optimizer")
_PHASE_SET = frozenset(PHASES)
# Before version 3 there was no gradient_packing phase: packing, dividing and unpacking the
# gradients were timed as part of "communication". Such steps are read with 0 packing
# seconds, and their communication keeps its old meaning (see ``RECORDS_NOTE``).
FIRST_VERSION_WITH_PACKING = 3
_PHASES_BEFORE_PACKING = frozenset(PHASES) - {"gradient_packing"}
RECORDS_NOTE = (
    "recorded before records version 3: its communication includes packing and unpacking "
    "the gradients"
)
# What the "communication" phase of a ``ddp`` step holds when its start record says
# ``ddp_communication: exposed_wait``: the wait for the bucketed all-reduces after backward's
# last bucket, plus the loss's all-reduce. Runs without it timed only the loss there.
DDP_EXPOSED_WAIT = "exposed_wait"
_INT4_MAX = 2**31 - 1  # counters are stored as 32-bit integers
_COMMON_COUNTERS = ("rank", "world_size")
_COUNTERS = {
    "step": (*_COMMON_COUNTERS, "epoch", "step", "samples"),
    "eval": (*_COMMON_COUNTERS, "epoch"),
    "allreduce": _COMMON_COUNTERS,
    "event": _COMMON_COUNTERS,
    "env": _COMMON_COUNTERS,
}
EVENTS = ("start", "goal_reached", "diverged", "finished", "failed", "switched_to_asgd")

_COMMON = {"v": int, "run_id": str, "rank": int, "world_size": int, "kind": str, "t": float}
_PAYLOAD: dict[str, dict[str, type | tuple[type, ...]]] = {
    "step": {"epoch": int, "step": int, "samples": int, "phases": dict},
    "eval": {
        "epoch": int,
        "metrics": dict,
        "eval_s": float,
        "train_s": float,
        "wall_s": float,
    },
    "allreduce": {"bytes": int, "elements": int, "dtype": str, "backend": str, "seconds": list},
    "event": {"event": str},
    "env": {},
}


# The machine's and the rank's CPU seconds since the common start, in a rank's final event
# (``Tracker.cpu_use``): what tells a contended run.
CPU_USE_FIELDS = ("cpu_window_s", "host_busy_cpu_s", "own_cpu_s")
# The machine's reference workload's median seconds, timed at the rank's start and end
# (``workers.machine_reference``); in the same final event, absent from older records.
MACHINE_REFERENCE_FIELD = "machine_reference_s"
_CPU_USE: dict[str, tuple[type, ...]] = dict.fromkeys(
    (*CPU_USE_FIELDS, MACHINE_REFERENCE_FIELD), (int, float)
)

# Fields of events that readers use, with their types; "required" ones must be there.
# Other details an event carries are free (stored as they are).
_EVENT_FIELDS: dict[str, dict[str, tuple[type, ...]]] = {
    "start": {
        "started_at": (str,),
        "compile_s": (int, float),
        "goal_target": (int, float),
        "goal_metric": (str,),
        "precision": (str,),
        "compile": (str,),
        "device": (str,),
        "variant": (str,),
        "compiled": (bool,),
        "network": (str,),
    },
    "goal_reached": {
        "time_to_accuracy_s": (int, float),
        "time_to_accuracy_without_eval_s": (int, float),
        "epoch": (int,),
        "value": (int, float),
        "target": (int, float),
    },
    "finished": {"status": (str,), "recompilations": (int,), **_CPU_USE},
    "failed": {"reason": (str,), **_CPU_USE},
    "diverged": {"reason": (str,), **_CPU_USE},
    "switched_to_asgd": {},
}
# Fields of the environment record that readers use, with their types (others are free).
_ENV_FIELDS: dict[str, tuple[type, ...]] = {
    "host": (str,),
    "node": (str,),
    "cpu": (str,),
    "cpu_count": (int,),
    "cpus_allowed": (int,),
    "torch_threads": (int,),
    "gpus": (list,),
    "node_rank": (int,),
    "local_rank": (int,),
    "local_world_size": (int,),
}
# Bytes per element of the data types an all-reduce record may name.
ALLREDUCE_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
_REQUIRED_EVENT_FIELDS = {
    "goal_reached": ("time_to_accuracy_s", "time_to_accuracy_without_eval_s"),
    "finished": ("status",),
}
# Durations that cannot be negative, by kind (``t``, every phase, all-reduce
# repetitions and these event fields are checked as well).
_DURATIONS = {
    "eval": ("eval_s", "train_s", "wall_s"),
    "event": (
        "compile_s",
        "time_to_accuracy_s",
        "time_to_accuracy_without_eval_s",
        "cpu_window_s",
        "host_busy_cpu_s",
        "own_cpu_s",
        MACHINE_REFERENCE_FIELD,
    ),
}
_INT8_MAX = 2**63 - 1  # byte and element counts are stored as 64-bit integers
# The longest time a record can hold, in seconds: no group runs longer than its wall-clock
# limit (at most a week), so a record time or a duration beyond it is a broken clock or
# a damaged file, never a measurement.
MAX_RECORD_S = MAX_GROUP_TIMEOUT_S
# The longest line a reader takes, in bytes: a record is a few hundred bytes (an
# all-reduce record with thousands of repetitions some tens of kilobytes), so a longer
# line is damage; it is quarantined without being held in memory whole.
MAX_LINE_BYTES = 4 * 2**20


class BadRecord(ValueError):
    """A line that is not a readable record of this schema version."""


def rank_file_name(rank: int) -> str:
    return f"rank-{rank}.jsonl"


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_or_none(v) for v in value]
    return value


# JSON has one number type: a float field accepts ints too (bools never).
_NUMBER = (int, float)
_CHECKS: dict[str, tuple[tuple[str, tuple[type, ...]], ...]] = {
    kind: tuple(
        (name, _NUMBER if expected is float else (expected,))  # type: ignore[misc]
        for name, expected in {**_COMMON, **payload}.items()
    )
    for kind, payload in _PAYLOAD.items()
}


# The fast check: fetch a kind's fields at once and compare their exact types
# with every allowed combination (``type(True)`` is ``bool``, so bools never
# pass as numbers). Only a record that fails is looked at field by field.
_GETTERS = {kind: itemgetter(*(name for name, _ in checks)) for kind, checks in _CHECKS.items()}
_ALLOWED_TYPES = {
    kind: set(product(*(types for _, types in checks))) for kind, checks in _CHECKS.items()
}


def validate_record(record: Any) -> dict[str, Any]:
    """Return ``record`` if it is a valid record, else raise :class:`BadRecord`.

    Ingest validates every line, so the common case is one C-level lookup;
    the field-by-field pass runs only to word the error.
    """
    if type(record) is not dict:
        raise BadRecord(f"a record is a JSON object, got {type(record).__name__}")
    kind = record.get("kind")
    getter = _GETTERS.get(kind)  # type: ignore[arg-type]
    if getter is None:
        if "kind" not in record:
            raise BadRecord("missing field 'kind'")
        raise BadRecord(f"unknown kind {kind!r}")
    if record.get("v") == 1 and kind in _RENAMED_SINCE_1:
        for old, new in _RENAMED_SINCE_1[kind].items():
            if old in record:
                record[new] = record.pop(old)
    try:
        types = tuple(map(type, getter(record)))
    except KeyError:
        types = ()
    if types not in _ALLOWED_TYPES[kind]:
        _explain(record, _CHECKS[kind])
    if record["v"] not in READABLE_VERSIONS:
        known = ", ".join(map(str, READABLE_VERSIONS))
        raise BadRecord(f"schema version {record['v']} (this reader knows {known})")
    if kind == "event" and record["event"] not in EVENTS:
        raise BadRecord(f"unknown event {record['event']!r}")
    for name in _COUNTERS[kind]:
        if not 0 <= record[name] <= _INT4_MAX:
            raise BadRecord(f"field {name!r} is out of range: {record[name]}")
    problem = quantities.FIELDS[("any", "world_size")].problem(record["world_size"])
    if problem:  # before the rank is judged against it
        raise BadRecord(problem)
    if record["rank"] >= record["world_size"]:
        raise BadRecord(f"rank {record['rank']} is outside a group of {record['world_size']}")
    if record["t"] < 0:
        raise BadRecord(f"field 't' is negative: {record['t']}")
    if record["t"] > MAX_RECORD_S:
        raise BadRecord(f"field 't' is beyond any group's time limit: {record['t']} s")
    if kind == "step":
        _complete_phases(record["v"], record["phases"])
    _check_values(kind, record)
    return record


def _complete_phases(version: int, phases: Any) -> None:
    """Raise :class:`BadRecord` for a step without one of its version's phases; fill in 0
    packing seconds for a step recorded before packing was timed apart."""
    if not isinstance(phases, dict):
        raise BadRecord(f"field 'phases' has {type(phases).__name__} {phases!r}")
    required = _PHASE_SET if version >= FIRST_VERSION_WITH_PACKING else _PHASES_BEFORE_PACKING
    if not phases.keys() >= required:
        missing = sorted(required - phases.keys())
        raise BadRecord(f"step record without phase(s) {', '.join(missing)}")
    if not phases.keys() <= _PHASE_SET:
        unknown = sorted(map(str, phases.keys() - _PHASE_SET))
        raise BadRecord(f"step record with unknown phase(s) {', '.join(unknown)}")
    phases.setdefault("gradient_packing", 0.0)


def _is_number(value: Any) -> bool:
    return type(value) in _NUMBER


def _check_values(kind: str, record: dict[str, Any]) -> None:
    """Raise :class:`BadRecord` for a value no measurement can have (a negative duration,
    a text where a number belongs, an event without the fields its readers need)."""
    if kind == "step":
        for phase in PHASES:
            value = record["phases"][phase]
            if not _is_number(value) or not 0 <= value <= MAX_RECORD_S:
                raise BadRecord(
                    f"phase {phase!r} must be seconds from 0 to {MAX_RECORD_S:g}, got {value!r}"
                )
    elif kind == "eval":
        for name, value in record["metrics"].items():
            if value is not None and not _is_number(value):
                raise BadRecord(f"metric {name!r} must be a number, got {value!r}")
            problem = quantities.metric_problem(name, value)
            if problem:
                raise BadRecord(problem)
    elif kind == "allreduce":
        for name in ("bytes", "elements"):
            if not 1 <= record[name] <= _INT8_MAX:
                raise BadRecord(f"field {name!r} is out of range: {record[name]}")
        element_bytes = ALLREDUCE_DTYPE_BYTES.get(record["dtype"])
        if element_bytes is None:
            known = ", ".join(ALLREDUCE_DTYPE_BYTES)
            dtype = record["dtype"][:40]
            raise BadRecord(f"all-reduce of unknown dtype {dtype!r} (known: {known})")
        if record["bytes"] != record["elements"] * element_bytes:
            raise BadRecord(
                f"all-reduce of {record['elements']} {record['dtype']} elements is "
                f"{record['elements'] * element_bytes} bytes, not {record['bytes']}"
            )
        if not record["seconds"]:
            raise BadRecord("all-reduce record without a timed repetition")
        for value in record["seconds"]:
            if not _is_number(value) or not 0 <= value <= MAX_RECORD_S:
                raise BadRecord(
                    f"all-reduce repetitions must be seconds from 0 to {MAX_RECORD_S:g}, "
                    f"got {value!r}"
                )
    elif kind == "event":
        event = record["event"]
        for name in _REQUIRED_EVENT_FIELDS.get(event, ()):
            if name not in record:
                raise BadRecord(f"{event} event without {name!r}")
        for name, types in _EVENT_FIELDS[event].items():
            if name in record and record[name] is not None and type(record[name]) not in types:
                raise BadRecord(f"{event} event: field {name!r} has {record[name]!r}")
        if event == "start" and isinstance(record.get("started_at"), str):
            try:
                moment = datetime.fromisoformat(record["started_at"])
                if moment.tzinfo is not None:  # past year 1 or 9999 in UTC: no time
                    moment.astimezone(UTC)
            except (ValueError, OverflowError):
                raise BadRecord(
                    f"start event: 'started_at' is no ISO 8601 time: {record['started_at'][:40]!r}"
                ) from None
    elif kind == "env":
        for name, types in _ENV_FIELDS.items():
            if record.get(name) is not None and type(record[name]) not in types:
                raise BadRecord(f"env record: field {name!r} has {record[name]!r}")
        gpus = record.get("gpus") or []
        if not all(isinstance(gpu, str) for gpu in gpus):
            raise BadRecord(f"env record: 'gpus' is a list of GPU names, got {gpus!r}")
    if kind == "event" and record["event"] == "start" and "goal_target" in record:
        metric = record.get("goal_metric")
        problem = quantities.metric_problem(str(metric), record["goal_target"], "goal_target")
        if problem:
            raise BadRecord(problem)
    for (of, name), declared in quantities.FIELDS.items():
        if of in (kind, f"{kind}:{record.get('event')}", "any"):
            problem = declared.problem(record.get(name))
            if problem:
                raise BadRecord(problem)
    for name in _DURATIONS.get(kind, ()):
        value = record.get(name)
        if value is not None and _is_number(value) and not 0 <= value <= MAX_RECORD_S:
            raise BadRecord(
                f"field {name!r} must be seconds from 0 to {MAX_RECORD_S:g}, got {value}"
            )


def _explain(record: dict[str, Any], checks: tuple[tuple[str, tuple[type, ...]], ...]) -> None:
    """Raise :class:`BadRecord` naming the first missing or mistyped field."""
    for name, expected in checks:
        if name not in record:
            raise BadRecord(f"{record['kind']} record without {name!r}")
        if type(record[name]) not in expected:
            value = record[name]
            raise BadRecord(f"field {name!r} has {type(value).__name__} {value!r}")
    raise BadRecord("unreadable record")  # unreachable: the fast check had a reason


Counter = Annotated[int, msgspec.Meta(ge=0, le=_INT4_MAX)]
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
                _PHASES_BEFORE_PACKING
            ):
                record.phases.setdefault("gradient_packing", 0.0)
            if (
                record.v in READABLE_VERSIONS
                and record.phases.keys() == _PHASE_SET
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


@dataclass
class RankRecords:
    """What one rank file holds: its valid records (in file order, and by kind)
    and how many lines were not valid."""

    path: PurePath
    records: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    problems: list[str] = field(default_factory=list)
    by_kind: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {kind: [] for kind in KINDS}
    )

    earlier_attempts: int = 0
    superseded: int = 0  # records of earlier attempts, set aside
    # What each record of this attempt stands for (see _identity) -> its line number.
    seen: dict[tuple[Any, ...], int] = field(default_factory=dict)
    # The time and line of this attempt's latest step, and the first step whose time went
    # back (a clock no run can have: the run's timings cannot be trusted).
    last_step: tuple[float, int] = (0.0, 0)
    clock_problem: str | None = None

    def add(self, record: dict[str, Any] | StepRecord, line: int = 0) -> None:
        """Keep ``record`` (read from line ``line``); :class:`BadRecord` if it repeats one."""
        kind = record["kind"]
        if kind == "env" and self.records:
            # A new attempt of this rank (restarted into the same directory):
            # what the earlier attempts wrote is superseded.
            self.earlier_attempts += 1
            self.superseded += len(self.records)
            self.records.clear()
            self.seen.clear()
            self.last_step = (0.0, 0)
            for records in self.by_kind.values():
                records.clear()
        identity = _identity(kind, record)
        if identity is not None:
            first = self.seen.setdefault(identity, line)
            if first != line:
                raise BadRecord(f"repeats the {kind} record of line {first}")
        if kind == "step":
            t = record.t if type(record) is StepRecord else record["t"]
            before, before_line = self.last_step
            if t < before and self.clock_problem is None:
                self.clock_problem = (
                    f"{self.path.name}: step times go back, from {before:g} s at line "
                    f"{before_line} to {t:g} s at line {line}"
                )
            elif t == before and before_line and self.clock_problem is None:
                self.clock_problem = (
                    f"{self.path.name}: step times stand still, {t:g} s at lines "
                    f"{before_line} and {line}"
                )
            self.last_step = (max(t, before), line if t >= before else before_line)
        self.records.append(record)
        self.by_kind[kind].append(record)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return self.by_kind[kind]

    def events(self) -> list[str]:
        return [r["event"] for r in self.of_kind("event")]


def _identity(kind: str, record: dict[str, Any] | StepRecord) -> tuple[Any, ...] | None:
    """What a record measures, once per attempt: a step, an epoch's evaluation, a message
    size's timings, an event (each happens once); ``None`` for the environment."""
    if type(record) is StepRecord:
        return (kind, record.epoch, record.step)
    if kind == "eval":
        return (kind, record["epoch"])
    if kind == "allreduce":
        return (kind, record["dtype"], record["elements"])
    if kind == "event":
        return (kind, record["event"])
    return None


RecordCheck = Callable[[dict[str, Any]], None]


def parse_rank_lines(
    path: PurePath, lines: Iterable[str | bytes], check: RecordCheck | None = None
) -> RankRecords:
    """Parse one rank file's lines; unreadable lines are counted and described.

    A truncated last line (a rank killed mid-write) is one bad line; so is a
    record that repeats an earlier one of the same attempt (the first stands),
    and one that ``check`` (e.g. the database's column limits) raises
    :class:`BadRecord` for. ``check`` sees every record but the steps.
    """
    result = RankRecords(path=path)
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            if len(line) > MAX_LINE_BYTES:
                raise BadRecord(f"a line longer than {MAX_LINE_BYTES:,} bytes")
            record = parse_line(line)
            if check is not None and type(record) is dict:
                check(record)
            result.add(record, number)
        except BadRecord as exc:
            result.bad_lines += 1
            if len(result.problems) < 20:
                result.problems.append(f"{path.name}:{number}: {exc}")
    if result.earlier_attempts:
        result.problems.append(
            f"{path.name}: {result.earlier_attempts} earlier attempt(s) of this rank "
            "superseded by the last one"
        )
    return result


def read_rank_file(path: Path) -> RankRecords:
    """Read one local rank file (see :func:`parse_rank_lines`)."""
    if not path.is_file():
        raise UnreadableRankFile(f"{path.name} is not a regular file")
    with path.open("rb") as handle:
        return parse_rank_lines(path, bounded_lines(handle))


_CHUNK_BYTES = 2**20


def bounded_lines(handle: Any, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of the binary file ``handle`` (without their line ends), holding at most
    ``limit`` + 1 bytes of any one line: a longer line is given cut to that length (so a
    reader sees it is too long) and the rest of it is skipped unread into memory."""
    head = b""  # the start of the line being read
    overlong = False
    while block := handle.read(_CHUNK_BYTES):
        *complete, rest = block.split(b"\n")
        for part in complete:
            line = head + part if not overlong else head
            yield line[: limit + 1]
            head, overlong = b"", False
        if not overlong:
            head += rest
            if len(head) > limit:
                head, overlong = head[: limit + 1], True
    if head:
        yield head


class InconsistentRun(ValueError):
    """Rank files of one run that disagree about the run they belong to, or whose clock
    went back."""


class UnreadableRankFile(InconsistentRun):
    """A rank file that is not a regular file (a device, a pipe, a link to one): never
    read, so nothing of its run is."""


RANK_FILE = re.compile(r"rank-(\d+)\.jsonl")


def rank_of(path: PurePath) -> int:
    """The rank a file ``rank-<r>.jsonl`` belongs to."""
    match = RANK_FILE.fullmatch(path.name)
    if match is None:
        raise ValueError(f"{path.name} is not a rank file name (rank-<r>.jsonl)")
    return int(match.group(1))


def read_run(run_dir: Path | str, fs: Any = None) -> list[RankRecords]:
    """Read every rank file of a run, checking they describe one run.

    ``fs`` is an fsspec file system for remote locations (default: local
    files). Raises :class:`InconsistentRun` when files disagree on ``run_id``
    or ``world_size``, or when a rank number does not match its file name.
    """
    ranks = list(iter_rank_files(run_dir, fs))
    check_consistent(ranks)
    return ranks


def iter_rank_files(
    run_dir: Path | str,
    fs: Any = None,
    check: RecordCheck | None = None,
    left_out: list[str] | None = None,
    inside: str | None = None,
) -> Iterator[RankRecords]:
    """Each rank file of a run, parsed, in rank order (one file in memory at a time
    until the caller keeps them). Consistency is the caller's to check; ``check``
    as in :func:`parse_rank_lines`. A file named like a rank file but not one
    (``rank--1.jsonl``, ``rank-0 (1).jsonl``) is not read, and said in ``left_out``;
    one that is not a regular file, or (``inside``: the sweep's folder) a link that
    leads out of ``inside``, raises :class:`UnreadableRankFile`. The run's folder is
    listed, never globbed: its path is a path, not a pattern."""
    if fs is None:
        folder = Path(run_dir)
        listed = sorted(os.listdir(folder)) if folder.is_dir() else []
        paths: list[PurePath] = [folder / name for name in listed]
        opener, is_file = open, os.path.isfile
    else:
        base = str(run_dir).rstrip("/")
        paths = [PurePosixPath(f"{base}/{name}") for name in folders.names(fs, base)]
        opener, is_file = fs.open, fs.isfile
    paths = [p for p in paths if p.name.startswith("rank-") and p.name.endswith(".jsonl")]
    for path in sorted(p for p in paths if not RANK_FILE.fullmatch(p.name)):
        if left_out is not None:
            left_out.append(f"{path.name}: not a rank file name (rank-<r>.jsonl); not read")
    paths = [p for p in paths if RANK_FILE.fullmatch(p.name)]
    for path in sorted(paths, key=rank_of):
        if not is_file(str(path)):
            raise UnreadableRankFile(
                f"{path.name} is not a regular file (a folder, a device, a pipe or a link "
                "to one), so the run is not read"
            )
        if inside is not None:
            try:
                folders.check_inside(inside, str(path), fs)
            except folders.LinkLeaves as exc:
                raise UnreadableRankFile(str(exc)) from None
        with gc_paused(), opener(str(path), "rb") as handle:
            rank = parse_rank_lines(path, bounded_lines(handle), check)
        yield rank


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building millions of records.

    Records are small dicts with no cycles among them: the collector would
    only rescan them over and over (about a third of the read time, measured).
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _identities(rank: RankRecords) -> set[tuple[str, int, int]]:
    """Distinct (run id, world size, rank) that a rank file's records name."""
    fields = ("run_id", "world_size", "rank")
    found = set(map(attrgetter(*fields), rank.by_kind["step"]))
    for kind, records in rank.by_kind.items():
        if kind != "step":
            found.update(map(itemgetter(*fields), records))
    return found


def check_consistent(ranks: Iterable[RankRecords]) -> None:
    """Raise :class:`InconsistentRun` unless the rank files describe one run."""
    run_ids: set[str] = set()
    world_sizes: set[int] = set()
    for rank in ranks:
        if rank.clock_problem:
            raise InconsistentRun(f"{rank.clock_problem}; the run's timings cannot be trusted")
        identities = _identities(rank)
        run_ids.update(i[0] for i in identities)
        world_sizes.update(i[1] for i in identities)
        others = {i[2] for i in identities} - {rank_of(rank.path)}
        if others:
            raise InconsistentRun(f"{rank.path.name} holds a record of rank {min(others)}")
    if len(run_ids) > 1:
        raise InconsistentRun(f"rank files name different runs: {sorted(run_ids)}")
    if len(world_sizes) > 1:
        raise InconsistentRun(f"rank files name different world sizes: {sorted(world_sizes)}")
