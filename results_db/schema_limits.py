"""What the results schema can hold, checked before anything is written.

PostgreSQL refuses a string longer than its ``VARCHAR(n)`` column, text holding a NUL
character and an integer beyond its column's range (``SMALLINT``, ``INTEGER``,
``BIGINT``); SQLite stores each without a word. So ingest checks values against the models'
own column types first, for every column of those types, and both databases end up holding
the same rows: a record with a value no column can hold is quarantined with its line
number (:func:`check_record`), and a run or sweep row, or a column of bulk rows, that cannot
be stored is refused with the column named (:func:`row_problems`, :func:`column_problems`)
before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import BigInteger, Integer, SmallInteger, String, Table
from sqlalchemy.types import TypeEngine

from results_db.models import AllReduceSample, Run, RunEnvironment, RunEvent
from scalebench.run_metrics import RUN_METRICS
from workers.records import FINAL_EVENTS, BadRecord

# The range of each integer type as PostgreSQL holds it (the most specific type first:
# SMALLINT and BIGINT are kinds of Integer to SQLAlchemy).
_RANGES: tuple[tuple[type[Integer], int, int], ...] = (
    (SmallInteger, -(2**15), 2**15 - 1),
    (BigInteger, -(2**63), 2**63 - 1),
    (Integer, -(2**31), 2**31 - 1),
)


def integer_range(kind: TypeEngine[Any]) -> tuple[int, int] | None:
    """The lowest and highest value a column of type ``kind`` holds on PostgreSQL, where
    it is an integer type (``None`` otherwise)."""
    for integer, low, high in _RANGES:
        if isinstance(kind, integer):
            return low, high
    return None


def value_problem(table: Table, column: str, value: Any) -> str | None:
    """Why ``value`` cannot be stored in ``table.column`` (``None`` when it can): a text
    longer than the column's length or holding a NUL character, an integer outside the
    column's range."""
    kind = table.c[column].type
    if isinstance(value, str) and isinstance(kind, String):
        if kind.length is not None and len(value) > kind.length:
            return (
                f"{column} is {len(value):,} characters long; the database keeps at most "
                f"{kind.length}"
            )
        if "\x00" in value:
            return f"{column} holds a NUL character, which PostgreSQL cannot store"
        return None
    bounds = integer_range(kind)
    if bounds is not None and isinstance(value, int) and not bounds[0] <= value <= bounds[1]:
        shown = str(value) if abs(value) < 10**30 else f"a number of {value.bit_length():,} bits"
        return f"{column} is {shown}, outside the database's range {bounds[0]}..{bounds[1]}"
    return None


def row_problems(table: Table, row: Mapping[str, Any]) -> list[str]:
    """Every value of ``row`` that ``table`` cannot store, described."""
    found = (value_problem(table, name, value) for name, value in row.items() if name in table.c)
    return [problem for problem in found if problem]


def rows_problems(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What ``table`` cannot store of ``rows``: each column's first problem, described
    with the table's name."""
    found: dict[str, str] = {}
    for row in rows:
        for name, value in row.items():
            if name in table.c and name not in found:
                problem = value_problem(table, name, value)
                if problem:
                    found[name] = f"{table.name}.{problem}"
    return list(found.values())


def column_problems(table: Table, columns: Mapping[str, Sequence[Any]]) -> list[str]:
    """What ``table`` cannot store of rows given as columns (the bulk-loaded tables): each
    integer column's smallest and largest value, each text column's longest value and any
    NUL character, checked at C speed (a column of a million values in milliseconds)."""
    found = []
    for name, values in columns.items():
        if name not in table.c or not values:
            continue
        kind = table.c[name].type
        if integer_range(kind) is not None:
            candidates = _extremes(values)
        elif isinstance(kind, String):
            # a bulk column repeats a few texts (the run's id): each is looked at once
            texts = {v for v in set(values) if isinstance(v, str)}
            candidates = sorted(texts, key=len)[-1:] + [v for v in texts if "\x00" in v][:1]
        else:
            continue
        problems = (value_problem(table, name, value) for value in candidates)
        found += [f"{table.name}.{problem}" for problem in problems if problem][:1]
    return found


def _extremes(values: Sequence[Any]) -> list[Any]:
    """The smallest and the largest of ``values``'s integers (at C speed where every value
    is a number; ``None`` and other values are left out)."""
    try:
        return [min(values), max(values)]
    except TypeError:  # a None or a text among them
        numbers = [v for v in values if isinstance(v, int)]
        return [min(numbers), max(numbers)] if numbers else []


# Record fields that end up in a column: kind (or "event:<name>") -> field -> (table, column).
_STORED_FIELDS: dict[str, dict[str, tuple[Table, str]]] = {
    "allreduce": {name: (AllReduceSample.__table__, name) for name in ("dtype", "backend")},
    "env": {
        name: (RunEnvironment.__table__, name)
        for name in ("host", "python", "torch", "cuda", "nccl")
    },
    "event": {"event": (RunEvent.__table__, "event")},
    "event:start": {
        name: (Run.__table__, name)
        for name in ("device", "precision", "compile", "variant", "goal_metric", "network")
    },
    # the counts and run metrics of a rank's final event that the run row keeps
    **{
        f"event:{final}": {
            name: (Run.__table__, name)
            for name in (
                *(("recompilations",) if final == "finished" else ()),
                *(metric.name for metric in RUN_METRICS),
            )
        }
        for final in FINAL_EVENTS
    },
}


def check_record(record: dict[str, Any]) -> None:
    """Raise :class:`~workers.records.BadRecord` when a field of ``record`` cannot be stored
    (a hook for :func:`workers.records.parse_rank_lines`; step records need no check)."""
    kind = record["kind"]
    fields = dict(_STORED_FIELDS.get(kind, {}))
    if kind == "event":
        fields.update(_STORED_FIELDS.get(f"event:{record['event']}", {}))
    for name, (table, column) in fields.items():
        value = record.get(name)
        if value is None:
            continue
        problem = value_problem(table, column, value if isinstance(value, int) else str(value))
        if problem:
            raise BadRecord(problem.replace(column, f"field {name!r}", 1))
