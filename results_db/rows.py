"""The rows of one run's records as the tables take them: evaluations, events and
environments as dicts, steps and all-reduce samples as columns, all-reduce curves; and
:class:`BulkLoader`, which inserts them (binary COPY on PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from operator import attrgetter, itemgetter
from typing import Any

from sqlalchemy import Connection, Table, insert

from results_db import pg_copy
from results_db.schema_limits import column_problems
from workers.records import (
    PHASES,
    RankRecords,
    StepRecord,
    rank_of,
)

ENV_FIELDS = ("host", "python", "torch", "cuda", "nccl")


def event_details(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in record.items()
        if k not in ("v", "run_id", "rank", "world_size", "kind", "t", "event")
    }


def eval_row(run_id: str, record: dict[str, Any], metric: str | None) -> dict[str, Any]:
    metrics = record["metrics"]
    return {
        "run_id": run_id,
        "epoch": record["epoch"],
        "t_s": record["t"],
        "metric_value": metrics.get(metric) if metric else None,
        "loss": metrics.get("loss"),
        "eval_s": record["eval_s"],
        "train_s": record["train_s"],
        "wall_s": record["wall_s"],
        "metrics": metrics,
    }


def env_row(run_id: str, record: dict[str, Any]) -> dict[str, Any]:
    details = event_details(record)
    row = {"run_id": run_id, "rank": record["rank"], "gpus": details.pop("gpus", []) or []}
    for name in ENV_FIELDS:
        value = details.pop(name, None)
        row[name] = None if value is None else str(value)
    row["details"] = details
    return row


STEP_COLUMNS = (
    "run_id",
    "rank",
    "epoch",
    "step",
    "t_s",
    "samples",
    "loss",
    "lr",
    *(f"{phase}_s" for phase in PHASES),
)


ALLREDUCE_COLUMNS = (
    "run_id",
    "rank",
    "dtype",
    "elements",
    "repetition",
    "world_size",
    "backend",
    "bytes",
    "seconds",
)


# PostgreSQL types of the bulk-loaded columns (see results_db.models).
def step_columns(run_id: str, ranks: Sequence[RankRecords]) -> dict[str, list[Any]]:
    """Step rows of every rank as columns named like :data:`STEP_COLUMNS`."""
    steps: list[StepRecord] = []
    rank_numbers: list[int] = []
    for rank in ranks:  # a repeated step was quarantined as the file was read
        records = rank.of_kind("step")
        steps += records
        rank_numbers += [rank_of(rank.path)] * len(records)
    phases = list(map(attrgetter("phases"), steps))
    columns: dict[str, list[Any]] = {
        "run_id": [run_id] * len(steps),
        "rank": rank_numbers,
        "epoch": list(map(attrgetter("epoch"), steps)),
        "step": list(map(attrgetter("step"), steps)),
        "t_s": list(map(attrgetter("t"), steps)),
        "samples": list(map(attrgetter("samples"), steps)),
        "loss": list(map(attrgetter("loss"), steps)),
        "lr": list(map(attrgetter("lr"), steps)),
    }
    for phase in PHASES:  # every step record has them all (checked, or filled in, when read)
        columns[f"{phase}_s"] = list(map(itemgetter(phase), phases))
    return columns


def allreduce_columns(run_id: str, ranks: Sequence[RankRecords]) -> dict[str, list[Any]]:
    """All-reduce repetitions of every rank as columns named like :data:`ALLREDUCE_COLUMNS`."""
    rows = [
        (
            run_id,
            rank_of(rank.path),
            r["dtype"],
            r["elements"],
            repetition,
            r["world_size"],
            r["backend"],
            r["bytes"],
            float(seconds),
        )
        for rank in ranks
        for r in rank.of_kind("allreduce")
        for repetition, seconds in enumerate(r["seconds"])
    ]
    if not rows:
        return {}
    return {
        name: list(values)
        for name, values in zip(ALLREDUCE_COLUMNS, zip(*rows, strict=True), strict=True)
    }


def allreduce_curves(run_id: str, ranks: Sequence[RankRecords]) -> list[dict[str, Any]]:
    """Per dtype and message size: the slowest rank's seconds of each repetition (the rows
    of ``allreduce_curve``; what every latency and bandwidth summary is made of)."""
    slowest: dict[tuple[str, int], list[float]] = {}
    for rank in ranks:
        for record in rank.of_kind("allreduce"):
            seconds = [float(s) for s in record["seconds"]]
            key = (record["dtype"], record["bytes"])
            known = slowest.setdefault(key, [])
            for repetition, value in enumerate(seconds):
                if repetition < len(known):
                    known[repetition] = max(known[repetition], value)
                else:
                    known.append(value)
    return [
        {"run_id": run_id, "dtype": dtype, "bytes": nbytes, "slowest_s": seconds}
        for (dtype, nbytes), seconds in sorted(slowest.items())
    ]


class BulkLoader:
    """Writes the large tables: binary COPY on PostgreSQL, executemany elsewhere.

    On PostgreSQL the rows are encoded here and COPied on one background
    thread, in submission order, so the caller can read the next rank file
    meanwhile (the server and the reader each get a core). :meth:`finish`
    waits for every COPY and re-raises the first error.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.postgres = conn.dialect.name == "postgresql"
        self._pool = ThreadPoolExecutor(max_workers=1) if self.postgres else None
        self._pending: list[Future[None]] = []

    def load(self, table: Table, columns: dict[str, list[Any]]) -> int:
        """Queue (PostgreSQL) or insert rows given as equal-length columns; returns how many.
        A column holding a value the table cannot store on PostgreSQL (which SQLite would
        store) raises :class:`ValueError` naming it, on either database, before any row is
        written (:func:`results_db.schema_limits.column_problems`)."""
        if not columns or not next(iter(columns.values())):
            return 0
        unstorable = column_problems(table, columns)
        if unstorable:
            raise ValueError(f"the run cannot be stored: {'; '.join(unstorable)}")
        names = list(columns)
        if self._pool is None:
            rows = [
                dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)
            ]
            self.conn.execute(insert(table), rows)
            return len(rows)
        stream, count = pg_copy.encode(
            [pg_copy.kind_of(table.c[name]) for name in names], list(columns.values())
        )
        sql = f"COPY {table.name} ({', '.join(names)}) FROM STDIN WITH (FORMAT binary)"
        self._pending.append(self._pool.submit(self._copy, sql, stream))
        return count

    def _copy(self, sql: str, stream: Any) -> None:
        dbapi = self.conn.connection.dbapi_connection
        with dbapi.cursor() as cursor:  # type: ignore[union-attr]
            cursor.copy_expert(sql, stream, size=1 << 20)

    def finish(self) -> None:
        """Wait for the queued COPYs; a stop signal meanwhile hangs up one that waits for a
        server (:func:`results_db.pg_watch.stops_hang_up`)."""
        if self._pool is None:
            return
        from results_db.pg_watch import stops_hang_up

        with stops_hang_up():
            self._pool.shutdown(wait=True)
        for done in self._pending:
            done.result()

    def abandon(self, stopping: bool = False) -> None:
        """Wait for the queued COPYs without raising their errors (one is already raised).
        ``stopping`` (the error in hand is a stop: Ctrl-C, SIGTERM): a COPY that waits for
        a server is hung up rather than waited for."""
        if self._pool is None:
            return
        from results_db.pg_watch import hang_up_waiting, stops_hang_up

        with stops_hang_up():
            if stopping:
                hang_up_waiting("stopped")
            self._pool.shutdown(wait=True, cancel_futures=True)
