"""Writing a run's rows: the run row and its small tables (evaluations, events,
environments, all-reduce curves) from its summary and records (:func:`write_run`), and
removing a run with every row it owns (:func:`delete_run`), and a planned run marked as
started (:func:`mark_running`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, delete, insert, update

from results_db import models
from results_db.ingest.run_checks import goal_target, run_image
from results_db.ingest.times import parse_time
from results_db.rows import allreduce_curves, env_row, eval_row, event_details
from results_db.run_summary import RunSummary
from results_db.schema_limits import rows_problems
from scalebench import config
from scalebench.config_hash import configuration_hash
from scalebench.manifest import GroupEntry
from scalebench.rank import DEFAULT_PRECISION
from scalebench.statuses import RUNNING
from scalebench.tasks import TASKS, TrainingSpec
from workers.records import PHASES, RankRecords


def run_strings(summary: RunSummary, request: dict[str, Any]) -> dict[str, Any]:
    """The run row's text columns that come from the request (the records' are checked
    line by line)."""
    return {
        "id": summary.run_id,
        "task": request.get("task"),
        "backend": request.get("backend", "gloo"),
        "variant": request.get("variant", "sync"),
    }


def mark_running(conn: Connection, sweep_id: str, run_id: str) -> bool:
    """Say that the group of run ``run_id`` has started: its row (a planned run, or an
    earlier attempt's) reads ``running``, and so does its sweep. The next load of the run
    replaces the row with what its ranks wrote. Returns whether a row of the sweep's was
    there to mark."""
    marked = conn.execute(
        update(models.Run)
        .where(models.Run.id == run_id, models.Run.sweep_id == sweep_id)
        .values(status=RUNNING, reason="")
    ).rowcount
    if marked:
        conn.execute(
            update(models.Sweep).where(models.Sweep.id == sweep_id).values(outcome=RUNNING)
        )
    return bool(marked)


def delete_run(conn: Connection, run_id: str) -> None:
    """Remove a run and every row it owns."""
    for child in (
        models.StepTiming,
        models.EpochEval,
        models.AllReduceSample,
        models.AllReduceCurve,
        models.RunEvent,
        models.RunEnvironment,
    ):
        conn.execute(delete(child).where(child.run_id == run_id))  # type: ignore[attr-defined]
    conn.execute(delete(models.Run).where(models.Run.id == run_id))


def _ended_at(started_at: datetime | None, summary: RunSummary) -> datetime | None:
    """When the run ended: its start plus its duration (seconds); NULL while it is running
    (a live load of a group that has not ended) or when it never started."""
    if started_at is None or summary.status == RUNNING:
        return None
    return started_at + timedelta(seconds=summary.duration_s)


def _run_values(
    sweep_id: str,
    request: dict[str, Any],
    group: GroupEntry,
    summary: RunSummary,
    ranks: Sequence[RankRecords],
    shared_node: bool,
) -> dict[str, Any]:
    """The run row's columns, from its request, its manifest group, its summary and its
    records (times in seconds)."""
    run_id = group.run_id
    spec = TASKS.get(request["task"])
    goal = spec.goal if isinstance(spec, TrainingSpec) else None
    start = summary.start
    started_at = parse_time(start.get("started_at"))
    # The plan's profile (a group that never started has no start event); runs loaded
    # before profiles existed ran on the host's network.
    network = str(group.network or start.get("network") or "host")
    return dict(
        id=run_id,
        sweep_id=sweep_id,
        task=request["task"],
        config_hash=configuration_hash(
            {**request, "precision": start.get("precision"), "network": network}
        ),
        world_size=group.world_size,
        repeat=group.repeat,
        backend=request.get("backend", "gloo"),
        device=str(start.get("device", "unknown")),
        precision=str(start.get("precision", DEFAULT_PRECISION)),
        compile=str(start.get("compile", "off")),
        compiled=bool(start.get("compiled", False)),
        compile_s=summary.compile_s,
        recompilations=summary.recompilations,
        variant=request.get("variant", "sync"),
        light=bool(request.get("light", False)),
        status=summary.status,
        reason=summary.reason,
        started_at=started_at,
        ended_at=_ended_at(started_at, summary),
        goal_reached=summary.goal_reached,
        goal_metric=goal.metric if goal else None,
        goal_target=goal_target(start, ranks, goal, bool(request.get("light"))),
        time_to_accuracy_s=summary.time_to_accuracy_s,
        time_to_accuracy_without_eval_s=summary.time_to_accuracy_without_eval_s,
        eval_s=summary.eval_s,
        compute_s=summary.compute_s,
        gradient_packing_s=summary.gradient_packing_s,
        communication_s=summary.communication_s,
        step_s=summary.step_s,
        communication_ratio=summary.communication_ratio,
        epochs=summary.epochs,
        steps=summary.steps,
        samples_per_s=summary.samples_per_s,
        step_records=summary.step_records,
        **{f"{phase}_total_s": summary.phase_totals_s.get(phase, 0.0) for phase in PHASES},
        quarantined_lines=summary.bad_lines,
        placement=str(request.get("placement", "pack")),
        shared_node=shared_node,
        # checked with the rest of the stored request; absent before it could be asked
        ranks_per_node=request.get("ranks_per_node", 1),
        network=network,
        stack=group.stack,
        pairing=group.pairing,
        image_digest=run_image(group),
        transport_within_node=summary.transport_within_node,
        transport_between_nodes=summary.transport_between_nodes,
        records_version=summary.records_version,
        contention_share=summary.contention_share,
        contended=summary.contention_share is not None
        and summary.contention_share > config.contention_threshold(),
        hardware=summary.hardware,
        **summary.metrics,
        ingested_at=datetime.now(UTC),
    )


def write_run(
    conn: Connection,
    sweep_id: str,
    request: dict[str, Any],
    group: GroupEntry,
    summary: RunSummary,
    ranks: Sequence[RankRecords],
    shared_node: bool = False,
) -> int:
    """The run row and its small tables (evaluations, events, environments); the rows
    written. Every value is first held to its column's type as PostgreSQL enforces it on
    either database (:mod:`results_db.schema_limits`): a row that cannot be stored raises
    :class:`ValueError` naming the column, before anything is written."""
    run_id = group.run_id
    spec = TASKS.get(request["task"])
    goal = spec.goal if isinstance(spec, TrainingSpec) else None
    run_row = _run_values(sweep_id, request, group, summary, ranks, shared_node)
    leader = ranks[0].of_kind("eval") if ranks else []
    evals = [eval_row(run_id, r, goal.metric if goal else None) for r in leader]
    events = [
        {
            "run_id": run_id,
            "rank": r["rank"],
            "t_s": r["t"],
            "event": r["event"],
            "details": event_details(r),
        }
        for rank in ranks
        for r in rank.of_kind("event")
    ]
    envs = [env_row(run_id, r) for rank in ranks for r in rank.of_kind("env")]
    tables = (
        (models.Run.__table__, [run_row]),
        (models.EpochEval.__table__, evals),
        (models.RunEvent.__table__, events),
        (models.RunEnvironment.__table__, envs),
        (models.AllReduceCurve.__table__, allreduce_curves(run_id, ranks)),
    )
    unstorable = [
        problem for table, table_rows in tables for problem in rows_problems(table, table_rows)
    ]
    if unstorable:
        raise ValueError(f"the run cannot be stored: {'; '.join(unstorable)}")
    rows = 0
    for table, table_rows in tables:
        if table_rows:
            conn.execute(insert(table), table_rows)
            rows += len(table_rows)
    return rows
