"""Checking a record against the schema: :func:`validate_record` refuses, with
:class:`BadRecord`, a record whose fields are missing or mistyped, or whose values no
measurement can have; it renames the fields of version 1 and completes the phases of steps
recorded before packing was timed apart.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache
from itertools import product
from operator import itemgetter
from typing import Any

from scalebench import quantities
from scalebench.run_metrics import RUN_METRICS
from workers.records.schema import (
    ALLREDUCE_DTYPE_BYTES,
    COMMON_FIELDS,
    COUNTERS,
    DURATIONS,
    ENV_FIELDS,
    EVENT_FIELDS,
    EVENTS,
    FINAL_EVENTS,
    FIRST_VERSION_WITH_PACKING,
    INT4_MAX,
    INT8_MAX,
    MAX_RECORD_S,
    PAYLOAD_FIELDS,
    PHASE_SET,
    PHASES,
    PHASES_BEFORE_PACKING,
    READABLE_VERSIONS,
    RENAMED_SINCE_1,
    REQUIRED_EVENT_FIELDS,
    BadRecord,
)

WORLD_SIZE = ("any", "world_size")  # the declared quantity of every record's group size

# JSON has one number type: a float field accepts ints too (bools never).
_NUMBER = (int, float)
_CHECKS: dict[str, tuple[tuple[str, tuple[type, ...]], ...]] = {
    kind: tuple(
        (name, _NUMBER if expected is float else (expected,))  # type: ignore[misc]
        for name, expected in {**COMMON_FIELDS, **payload}.items()
    )
    for kind, payload in PAYLOAD_FIELDS.items()
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
    if record.get("v") == 1 and kind in RENAMED_SINCE_1:
        for old, new in RENAMED_SINCE_1[kind].items():
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
    for name in COUNTERS[kind]:
        if not 0 <= record[name] <= INT4_MAX:
            raise BadRecord(f"field {name!r} is out of range: {record[name]}")
    problem = quantities.FIELDS[WORLD_SIZE].problem(record["world_size"])
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
    required = PHASE_SET if version >= FIRST_VERSION_WITH_PACKING else PHASES_BEFORE_PACKING
    if not phases.keys() >= required:
        missing = sorted(required - phases.keys())
        raise BadRecord(f"step record without phase(s) {', '.join(missing)}")
    if not phases.keys() <= PHASE_SET:
        unknown = sorted(map(str, phases.keys() - PHASE_SET))
        raise BadRecord(f"step record with unknown phase(s) {', '.join(unknown)}")
    phases.setdefault("gradient_packing", 0.0)


def _is_number(value: Any) -> bool:
    return type(value) in _NUMBER


def _check_values(kind: str, record: dict[str, Any]) -> None:
    """Raise :class:`BadRecord` for a value no measurement can have (a negative duration,
    a text where a number belongs, an event without the fields its readers need, a run
    metric of a final event outside its quantity's range)."""
    _VALUE_CHECKS[kind](record)
    event = record["event"] if kind == "event" else None  # a known event's name, or None
    for name, declared in _declared_quantities(kind, event):
        problem = declared.problem(record.get(name))
        if problem:
            raise BadRecord(problem)
    if kind == "event" and record["event"] in FINAL_EVENTS:
        for metric in RUN_METRICS:
            problem = metric.quantity.problem(record.get(metric.name))
            if problem:
                raise BadRecord(problem)
    for name in DURATIONS.get(kind, ()):
        value = record.get(name)
        if value is not None and _is_number(value) and not 0 <= value <= MAX_RECORD_S:
            raise BadRecord(
                f"field {name!r} must be seconds from 0 to {MAX_RECORD_S:g}, got {value}"
            )


@cache
def _declared_quantities(kind: str, event: Any) -> tuple[tuple[str, quantities.Quantity], ...]:
    """The declared quantities (:data:`scalebench.quantities.FIELDS`) that a record of
    ``kind`` (an event: named ``event``) holds, as (field, quantity): worked out once for
    each kind and event, since every step of a run asks again. The group's size is left out:
    :func:`validate_record` checks it first, before the rank is judged against it."""
    return tuple(
        (name, declared)
        for (of, name), declared in quantities.FIELDS.items()
        if of in (kind, f"{kind}:{event}", "any") and (of, name) != WORLD_SIZE
    )


def _check_phases(record: dict[str, Any]) -> None:
    """A step's phases: each seconds from 0 to :data:`MAX_RECORD_S`."""
    for phase in PHASES:
        value = record["phases"][phase]
        if not _is_number(value) or not 0 <= value <= MAX_RECORD_S:
            raise BadRecord(
                f"phase {phase!r} must be seconds from 0 to {MAX_RECORD_S:g}, got {value!r}"
            )


def _check_metrics(record: dict[str, Any]) -> None:
    """An evaluation's metrics: numbers (or null) within what each metric can be."""
    for name, value in record["metrics"].items():
        if value is not None and not _is_number(value):
            raise BadRecord(f"metric {name!r} must be a number, got {value!r}")
        problem = quantities.metric_problem(name, value)
        if problem:
            raise BadRecord(problem)


def _check_allreduce(record: dict[str, Any]) -> None:
    """An all-reduce's message (a known dtype, bytes that match its elements) and its timed
    repetitions (at least one, each seconds from 0 to :data:`MAX_RECORD_S`)."""
    for name in ("bytes", "elements"):
        if not 1 <= record[name] <= INT8_MAX:
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
                f"all-reduce repetitions must be seconds from 0 to {MAX_RECORD_S:g}, got {value!r}"
            )


def _check_event(record: dict[str, Any]) -> None:
    """An event's fields that readers use: there where required, of their types; a start
    event's time an ISO 8601 one and its goal within what the goal's metric can be."""
    event = record["event"]
    for name in REQUIRED_EVENT_FIELDS.get(event, ()):
        if name not in record:
            raise BadRecord(f"{event} event without {name!r}")
    for name, types in EVENT_FIELDS[event].items():
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
    if event == "start" and "goal_target" in record:
        metric = record.get("goal_metric")
        problem = quantities.metric_problem(str(metric), record["goal_target"], "goal_target")
        if problem:
            raise BadRecord(problem)


def _check_env(record: dict[str, Any]) -> None:
    """The environment's fields that readers use, of their types; its GPUs named."""
    for name, types in ENV_FIELDS.items():
        if record.get(name) is not None and type(record[name]) not in types:
            raise BadRecord(f"env record: field {name!r} has {record[name]!r}")
    gpus = record.get("gpus") or []
    if not all(isinstance(gpu, str) for gpu in gpus):
        raise BadRecord(f"env record: 'gpus' is a list of GPU names, got {gpus!r}")


# Each kind's own checks, before those of the declared quantities and durations.
_VALUE_CHECKS: dict[str, Callable[[dict[str, Any]], None]] = {
    "step": _check_phases,
    "eval": _check_metrics,
    "allreduce": _check_allreduce,
    "event": _check_event,
    "env": _check_env,
}


def _explain(record: dict[str, Any], checks: tuple[tuple[str, tuple[type, ...]], ...]) -> None:
    """Raise :class:`BadRecord` naming the first missing or mistyped field."""
    for name, expected in checks:
        if name not in record:
            raise BadRecord(f"{record['kind']} record without {name!r}")
        if type(record[name]) not in expected:
            value = record[name]
            raise BadRecord(f"field {name!r} has {type(value).__name__} {value!r}")
    raise BadRecord("unreadable record")  # unreachable: the fast check had a reason
