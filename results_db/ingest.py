"""Loading what the workers recorded into the results database.

A results location (a local path or any fsspec URI) holds sweep directories,
each with a ``sweep.json`` manifest and one directory per run:

    <location>/<sweep>/sweep.json (and verdicts.jsonl while it runs: scalebench.manifest)
    <location>/<sweep>/<run>/rank-<r>.jsonl

Each run is loaded in one transaction that first deletes the run's earlier
rows, so ingesting the same run again leaves the same rows, and a crash in
the middle leaves nothing of that run half-written. Lines that cannot be read
are counted into the run's ``quarantined_lines`` and reported; rank files that
disagree about their run are refused, with the reason, and nothing of that run
is written. Failed, diverged and timed-out runs are loaded with that status
and whatever they measured. On PostgreSQL the large tables (step timings,
all-reduce samples) are loaded with binary COPY.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import attrgetter, itemgetter
from typing import Any

import fsspec
from sqlalchemy import Connection, Engine, Table, delete, insert, select, update

from results_db import pg_copy
from results_db.analytics import configuration_hash
from results_db.models import (
    AllReduceCurve,
    AllReduceSample,
    EpochEval,
    Run,
    RunEnvironment,
    RunEvent,
    StepTiming,
    Sweep,
)
from results_db.run_summary import RunSummary, summarise
from scalebench import manifest as sweep_manifest
from workers.records import (
    PHASES,
    InconsistentRun,
    RankRecords,
    StepRecord,
    check_consistent,
    gc_paused,
    iter_rank_files,
    rank_of,
)
from workers.records import SWEEP_MANIFEST as MANIFEST
from workers.tasks import TASKS, Goal, TrainingSpec

ENV_FIELDS = ("host", "python", "torch", "cuda", "nccl")


@dataclass
class IngestReport:
    """What one ingest did; ``refused`` and ``problems`` say what it could not read."""

    sweeps: int = 0
    runs: int = 0
    rows: int = 0
    quarantined_lines: int = 0
    refused: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def find_sweeps(fs: Any, root: str) -> list[str]:
    """Sweep directories at ``root``: ``root`` itself, or its sub-directories with a manifest."""
    root = root.rstrip("/")
    if fs.exists(f"{root}/{MANIFEST}"):
        return [root]
    return sorted(path.rsplit("/", 1)[0] for path in fs.glob(f"{root}/*/{MANIFEST}"))


def ingest_location(
    engine: Engine,
    location: str,
    progress: Callable[[str], None] | None = None,
    only: Collection[str] | None = None,
) -> IngestReport:
    """Ingest every sweep under ``location`` (a path or an fsspec URI).

    ``only``: load just these runs (and the sweep's row), e.g. the group that just
    ended while its sweep goes on; the sweep's outcome still counts every group.
    """
    say = progress or (lambda line: None)
    report = IngestReport()
    started = time.perf_counter()
    fs, root = fsspec.core.url_to_fs(location)
    sweeps = find_sweeps(fs, root)
    if not sweeps:
        raise FileNotFoundError(f"no sweep ({MANIFEST}) found at {location}")
    for sweep_path in sweeps:
        manifest = sweep_manifest.read(fs, sweep_path).to_json()  # verdicts folded in
        with gc_paused():
            ingest_sweep(engine, fs, sweep_path, manifest, report, say, only)
    report.seconds = time.perf_counter() - started
    return report


def ingest_sweep(
    engine: Engine,
    fs: Any,
    sweep_path: str,
    manifest: dict[str, Any],
    report: IngestReport,
    say: Callable[[str], None],
    only: Collection[str] | None = None,
) -> None:
    sweep_id = manifest["sweep_id"]
    request = manifest["request"]
    with engine.begin() as conn:
        _upsert_sweep(conn, manifest)
    report.sweeps += 1
    groups = manifest["groups"]
    statuses = []
    stored: dict[str, str] = {}  # what earlier ingests stored of the runs not loaded now
    if only is not None:
        with engine.connect() as conn:
            query = select(Run.id, Run.status).where(Run.sweep_id == sweep_id)
            stored = {run_id: status for run_id, status in conn.execute(query)}
    for index, group in enumerate(groups, start=1):
        run_path = f"{sweep_path}/{group['run_id']}"
        if group["status"] in ("planned", "skipped") and not fs.exists(run_path):
            continue  # never started
        if only is not None and group["run_id"] not in only:
            if group["run_id"] in stored:
                statuses.append(stored[group["run_id"]])
            continue
        say(f"[{index}/{len(groups)}] loading {group['run_id']} ...")
        tick = time.perf_counter()
        try:
            with engine.begin() as conn:
                rows, summary, ranks = load_run(conn, fs, run_path, sweep_id, request, group)
        except Exception as exc:  # one unreadable run must not stop the others
            reason = exc.args[0] if isinstance(exc, InconsistentRun) else repr(exc)
            report.refused.append(f"{group['run_id']}: {reason}")
            say(f"refused {group['run_id']}: {reason}")
            if isinstance(exc, InconsistentRun):
                # The run's earlier rows no longer stand for what is on disk.
                with engine.begin() as conn:
                    delete_run(conn, group["run_id"])
            statuses.append("refused")
            continue
        statuses.append(summary.status)
        report.runs += 1
        report.rows += rows
        report.quarantined_lines += summary.bad_lines
        for rank in ranks:
            report.problems += rank.problems
        rate = rows / max(time.perf_counter() - tick, 1e-9)
        say(
            f"[{index}/{len(groups)}] {group['run_id']}: {summary.status}, "
            f"{rows:,} rows ({rate:,.0f} rows/s)"
            + (f", {summary.bad_lines} unreadable line(s) quarantined" if summary.bad_lines else "")
        )
    with engine.begin() as conn:
        conn.execute(
            update(Sweep)
            .where(Sweep.id == sweep_id)
            .values(outcome=_sweep_outcome(statuses, groups))
        )


def _sweep_outcome(statuses: Sequence[str], groups: Sequence[dict[str, Any]]) -> str:
    """``running`` while groups are planned, else succeeded / partial / failed / cancelled."""
    if any(g["status"] == "planned" for g in groups):
        return "running"
    if any(g["status"] in ("cancelled", "skipped") for g in groups):
        return "cancelled"
    if statuses and all(s == "succeeded" for s in statuses):
        return "succeeded"
    return "partial" if "succeeded" in statuses else "failed"


def _parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _upsert_sweep(conn: Connection, manifest: dict[str, Any]) -> None:
    request = manifest["request"]
    values = {
        "task": request["task"],
        "trigger": manifest.get("trigger", "cli"),
        "config": request,
        "config_hash": manifest.get("config_hash") or configuration_hash(request),
        "code_version": manifest.get("code_version", "unknown"),
        "created_at": _parse_time(manifest.get("created_at")) or datetime.now(UTC),
        "finished_at": _parse_time(manifest.get("finished_at")),
    }
    exists = conn.execute(select(Sweep.id).where(Sweep.id == manifest["sweep_id"])).first()
    if exists:
        conn.execute(update(Sweep).where(Sweep.id == manifest["sweep_id"]).values(**values))
    else:
        conn.execute(insert(Sweep).values(id=manifest["sweep_id"], **values))


def load_run(
    conn: Connection,
    fs: Any,
    run_path: str,
    sweep_id: str,
    request: dict[str, Any],
    group: dict[str, Any],
) -> tuple[int, RunSummary, list[RankRecords]]:
    """Replace one run's rows with what its rank files hold, within ``conn``'s transaction.

    Rank files are read one after another; on PostgreSQL each one's bulk rows
    are COPied on a second thread while the next file is read. Raises
    :class:`InconsistentRun` (and the transaction rolls back) when the files
    disagree. Returns the rows written, the run's summary and its records.
    """
    run_id = group["run_id"]
    delete_run(conn, run_id)
    ranks: list[RankRecords] = []
    rows = 0
    loader = BulkLoader(conn)
    try:
        if fs.exists(run_path):
            for rank in iter_rank_files(run_path, fs):
                ranks.append(rank)
                rows += loader.load(StepTiming.__table__, _step_columns(run_id, [rank]))
                rows += loader.load(AllReduceSample.__table__, _allreduce_columns(run_id, [rank]))
    except BaseException:
        loader.abandon()  # the error in hand is the one to report
        raise
    loader.finish()
    check_consistent(ranks)
    summary = summarise(ranks, run_id, group["world_size"], group.get("status"))
    launcher_reason = group.get("reason", "")
    if summary.status in ("cancelled", "timed_out") and launcher_reason:
        summary.reason = launcher_reason  # who stopped it, and when, is the launcher's to say
    elif group.get("status") == "failed" and summary.status == "succeeded":
        summary.status, summary.reason = "failed", launcher_reason
    elif summary.status == "failed" and launcher_reason and launcher_reason not in summary.reason:
        # What the launcher saw (a pod that was never scheduled, a rank killed
        # by a signal) comes first; the ranks' own records add the detail.
        summary.reason = "; ".join(filter(None, [launcher_reason, summary.reason]))
    rows += _write_run(conn, sweep_id, request, group, summary, ranks)
    return rows, summary, ranks


def delete_run(conn: Connection, run_id: str) -> None:
    """Remove a run and every row it owns."""
    for child in (StepTiming, EpochEval, AllReduceSample, AllReduceCurve, RunEvent,
                  RunEnvironment):
        conn.execute(delete(child).where(child.run_id == run_id))  # type: ignore[attr-defined]
    conn.execute(delete(Run).where(Run.id == run_id))


def goal_target(start: dict[str, Any], ranks: Sequence[RankRecords], goal: Goal | None,
                light: bool) -> float | None:  # fmt: skip
    """The target the run trained to: from its own records when they say (a light variant's
    target may change between versions), else the task's current one."""
    if goal is None:
        return None
    if isinstance(start.get("goal_target"), int | float):
        return float(start["goal_target"])
    for rank in ranks:
        for event in rank.of_kind("event"):
            if event["event"] == "goal_reached" and isinstance(event.get("target"), int | float):
                return float(event["target"])
    return goal.target(light)


def _write_run(
    conn: Connection,
    sweep_id: str,
    request: dict[str, Any],
    group: dict[str, Any],
    summary: RunSummary,
    ranks: Sequence[RankRecords],
) -> int:
    """The run row and its small tables (evaluations, events, environments)."""
    run_id = group["run_id"]
    spec = TASKS.get(request["task"])
    goal = spec.goal if isinstance(spec, TrainingSpec) else None
    start = summary.start
    started_at = _parse_time(start.get("started_at"))
    conn.execute(
        insert(Run).values(
            id=run_id,
            sweep_id=sweep_id,
            task=request["task"],
            config_hash=configuration_hash({**request, "precision": start.get("precision")}),
            world_size=group["world_size"],
            repeat=group.get("repeat", 0),
            backend=request.get("backend", "gloo"),
            device=str(start.get("device", "unknown")),
            precision=str(start.get("precision", "fp32")),
            compile=str(start.get("compile", "off")),
            compiled=bool(start.get("compiled", False)),
            compile_s=summary.compile_s,
            recompilations=summary.recompilations,
            variant=request.get("variant", "sync"),
            light=bool(request.get("light", False)),
            status=summary.status,
            reason=summary.reason,
            started_at=started_at,
            ended_at=started_at + timedelta(seconds=summary.duration_s) if started_at else None,
            goal_reached=summary.goal_reached,
            goal_metric=goal.metric if goal else None,
            goal_target=goal_target(start, ranks, goal, bool(request.get("light"))),
            time_to_accuracy_s=summary.time_to_accuracy_s,
            time_to_accuracy_without_eval_s=summary.time_to_accuracy_without_eval_s,
            eval_s=summary.eval_s,
            compute_s=summary.compute_s,
            communication_s=summary.communication_s,
            step_s=summary.step_s,
            communication_ratio=summary.communication_ratio,
            epochs=summary.epochs,
            steps=summary.steps,
            samples_per_s=summary.samples_per_s,
            step_records=summary.step_records,
            **{f"{phase}_total_s": summary.phase_totals_s.get(phase, 0.0) for phase in PHASES},
            quarantined_lines=summary.bad_lines,
            ingested_at=datetime.now(UTC),
        )
    )
    rows = 1
    leader = ranks[0].of_kind("eval") if ranks else []
    evals = [_eval_row(run_id, r, goal.metric if goal else None) for r in leader]
    events = [
        {"run_id": run_id, "rank": r["rank"], "t_s": r["t"], "event": r["event"],
         "details": _details(r)}
        for rank in ranks for r in rank.of_kind("event")
    ]  # fmt: skip
    envs = [_env_row(run_id, r) for rank in ranks for r in rank.of_kind("env")]
    for table, table_rows in (
        (EpochEval.__table__, evals),
        (RunEvent.__table__, events),
        (RunEnvironment.__table__, envs),
        (AllReduceCurve.__table__, allreduce_curves(run_id, ranks)),
    ):
        if table_rows:
            conn.execute(insert(table), table_rows)
            rows += len(table_rows)
    return rows


def _details(record: dict[str, Any]) -> dict[str, Any]:
    return {
        k: v
        for k, v in record.items()
        if k not in ("v", "run_id", "rank", "world_size", "kind", "t", "event")
    }


def _eval_row(run_id: str, record: dict[str, Any], metric: str | None) -> dict[str, Any]:
    metrics = record["metrics"]
    return {
        "run_id": run_id,
        "epoch": record["epoch"],
        "t_s": record["t"],
        "metric_value": metrics.get(metric) if metric else None,
        "loss": metrics.get("loss"),
        "eval_s": record["eval_seconds"],
        "train_s": record["train_seconds"],
        "wall_s": record["wall_seconds"],
        "metrics": metrics,
    }


def _env_row(run_id: str, record: dict[str, Any]) -> dict[str, Any]:
    details = _details(record)
    row = {"run_id": run_id, "rank": record["rank"], "gpus": details.pop("gpus", []) or []}
    for name in ENV_FIELDS:
        value = details.pop(name, None)
        row[name] = None if value is None else str(value)
    row["details"] = details
    return row


STEP_COLUMNS = (
    "run_id", "rank", "epoch", "step", "t_s", "samples", "loss", "lr",
    "data_s", "forward_s", "loss_s", "backward_s", "communication_s", "optimizer_s",
)  # fmt: skip
ALLREDUCE_COLUMNS = (
    "run_id", "rank", "dtype", "elements", "repetition", "world_size", "backend", "bytes",
    "seconds",
)  # fmt: skip


# PostgreSQL types of the bulk-loaded columns (see results_db.models).
COLUMN_KINDS = {
    "run_id": "text", "dtype": "text", "backend": "text",
    "rank": "int4", "epoch": "int4", "step": "int4", "samples": "int4",
    "repetition": "int4", "world_size": "int4",
    "elements": "int8", "bytes": "int8",
    "t_s": "float8", "loss": "float8", "lr": "float8", "data_s": "float8",
    "forward_s": "float8", "loss_s": "float8", "backward_s": "float8",
    "communication_s": "float8", "optimizer_s": "float8", "seconds": "float8",
}  # fmt: skip


def _step_columns(run_id: str, ranks: Sequence[RankRecords]) -> dict[str, list[Any]]:
    """Step rows of every rank as columns named like :data:`STEP_COLUMNS`."""
    steps: list[StepRecord] = []
    rank_numbers: list[int] = []
    for rank in ranks:
        records = rank.of_kind("step")
        keys = set(map(attrgetter("epoch", "step"), records))
        if len(keys) != len(records):
            records = _first_of_each_step(records)  # a file appended to twice
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
    for phase in PHASES:  # every step record has all six (checked when read)
        columns[f"{phase}_s"] = list(map(itemgetter(phase), phases))
    return columns


def _first_of_each_step(records: list[StepRecord]) -> list[StepRecord]:
    seen: set[tuple[int, int]] = set()
    kept = []
    for r in records:
        if (r.epoch, r.step) not in seen:
            seen.add((r.epoch, r.step))
            kept.append(r)
    return kept


def _allreduce_columns(run_id: str, ranks: Sequence[RankRecords]) -> dict[str, list[Any]]:
    """All-reduce repetitions of every rank as columns named like :data:`ALLREDUCE_COLUMNS`."""
    rows = [
        (run_id, rank_of(rank.path), r["dtype"], r["elements"], repetition, r["world_size"],
         r["backend"], r["bytes"], float(seconds))
        for rank in ranks
        for r in rank.of_kind("allreduce")
        for repetition, seconds in enumerate(r["seconds"])
    ]  # fmt: skip
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
    return [{"run_id": run_id, "dtype": dtype, "bytes": nbytes, "slowest_s": seconds}
            for (dtype, nbytes), seconds in sorted(slowest.items())]  # fmt: skip


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
        """Queue (PostgreSQL) or insert rows given as equal-length columns; returns how many."""
        if not columns or not next(iter(columns.values())):
            return 0
        names = list(columns)
        if self._pool is None:
            rows = [
                dict(zip(names, row, strict=True)) for row in zip(*columns.values(), strict=True)
            ]
            self.conn.execute(insert(table), rows)
            return len(rows)
        stream, count = pg_copy.encode(
            [COLUMN_KINDS[name] for name in names], list(columns.values())
        )
        sql = f"COPY {table.name} ({', '.join(names)}) FROM STDIN WITH (FORMAT binary)"
        self._pending.append(self._pool.submit(self._copy, sql, stream))
        return count

    def _copy(self, sql: str, stream: Any) -> None:
        dbapi = self.conn.connection.dbapi_connection
        with dbapi.cursor() as cursor:  # type: ignore[union-attr]
            cursor.copy_expert(sql, stream, size=1 << 20)

    def finish(self) -> None:
        if self._pool is None:
            return
        self._pool.shutdown(wait=True)
        for done in self._pending:
            done.result()

    def abandon(self) -> None:
        """Wait for the queued COPYs without raising their errors (one is already raised)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
