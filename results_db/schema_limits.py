"""What the results schema can hold, checked before anything is written.

PostgreSQL refuses a string longer than its ``VARCHAR(n)`` column and an
integer beyond its column's range; SQLite stores either without a word. So
ingest checks values against the models' own column types first, and both
databases end up holding the same rows: a record with a value no column can
hold is quarantined with its line number, a run or sweep row that cannot be
stored is refused with the field named.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import BigInteger, Integer, String, Table

from results_db.models import AllReduceSample, Run, RunEnvironment, RunEvent
from workers.records import BadRecord

_RANGES = {BigInteger: (-(2**63), 2**63 - 1), Integer: (-(2**31), 2**31 - 1)}


def value_problem(table: Table, column: str, value: Any) -> str | None:
    """Why ``value`` cannot be stored in ``table.column`` (``None`` when it can)."""
    kind = table.c[column].type
    length = kind.length if isinstance(kind, String) else None
    if length is not None and isinstance(value, str) and len(value) > length:
        return f"{column} is {len(value):,} characters long; the database keeps at most {length}"
    for integer, (low, high) in _RANGES.items():
        if type(kind) is integer and isinstance(value, int) and not low <= value <= high:
            return f"{column} is {value}, outside the database's range {low}..{high}"
    return None


def row_problems(table: Table, row: Mapping[str, Any]) -> list[str]:
    """Every value of ``row`` that ``table`` cannot store, described."""
    found = (value_problem(table, name, value) for name, value in row.items() if name in table.c)
    return [problem for problem in found if problem]


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
        for name in ("device", "precision", "compile", "variant", "goal_metric")
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
