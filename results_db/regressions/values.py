"""The values the detector compares, read from the database: each compared run's metric.

Time to accuracy is a column of the run; ``steady_step_s`` and ``allreduce_largest_s`` are
computed from the run's step timings and all-reduce samples; a metric of
:data:`~results_db.regressions.rules.PER_REFERENCE` is the metric in seconds divided by the
run's ``machine_reference_s``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from sqlalchemy import Connection, func, select

from results_db.models import AllReduceSample, Run, StepTiming
from results_db.regressions.comparable import Comparable
from results_db.regressions.rules import PER_REFERENCE

# Steps at the start of a run that ``steady_step_s`` leaves out.
WARMUP_STEPS = 10

RunValue = tuple[str, int, float]  # (run id, worker count, value)


def _allreduce_values(
    conn: Connection, sweep_ids: list[str], runs_taken: Comparable
) -> list[RunValue]:
    """Each compared run's median time (s) of its largest float32 size."""
    runs = conn.execute(
        select(Run.id, Run.world_size)
        .where(Run.sweep_id.in_(sweep_ids), *runs_taken.conditions())
        .order_by(Run.id)
    ).all()
    values: list[RunValue] = []
    for run_id, world_size in runs:
        mine = (AllReduceSample.run_id == run_id, AllReduceSample.dtype == "float32")
        largest = conn.execute(select(func.max(AllReduceSample.elements)).where(*mine)).scalar()
        if largest is None:
            continue
        slowest = conn.execute(
            select(func.max(AllReduceSample.seconds))
            .where(*mine, AllReduceSample.elements == largest)
            .group_by(AllReduceSample.repetition)
        ).scalars()
        values.append((run_id, world_size, statistics.median(slowest)))
    return values


# A step's compute phase: forward, loss, backward and the optimizer's update.
_COMPUTE = StepTiming.forward_s + StepTiming.loss_s + StepTiming.backward_s + StepTiming.optimizer_s
# What :func:`step_medians` gives, each a column expression of one rank's step, seconds.
STEP_PARTS = {
    # every phase, in the order the step runs them
    "steady_step_s": StepTiming.data_s
    + StepTiming.forward_s
    + StepTiming.loss_s
    + StepTiming.backward_s
    + StepTiming.gradient_packing_s
    + StepTiming.communication_s
    + StepTiming.optimizer_s,
    "compute_s": _COMPUTE,
    "communication_s": StepTiming.communication_s,
    "data_s": StepTiming.data_s,
}


def step_medians(conn: Connection, run_id: str) -> dict[str, float]:
    """The run's median step and phases (seconds, :data:`STEP_PARTS`) after warm-up; empty
    for a run without steps.

    A step's time (and each phase's) is its slowest rank's: the group waits for that rank.
    The run's first :data:`WARMUP_STEPS` steps are left out (its very first step takes about a
    third longer than the rest), unless that would leave none. Unlike whole-run samples/s,
    the figure leaves out evaluation and the time between steps, and a median is not moved by
    a few steps that other work on the machine slowed down.
    """
    rows = conn.execute(
        select(*(func.max(part) for part in STEP_PARTS.values()))
        .where(StepTiming.run_id == run_id)
        .group_by(StepTiming.epoch, StepTiming.step)
        .order_by(StepTiming.epoch, StepTiming.step)
    ).all()
    steady = rows[WARMUP_STEPS:] or rows
    return {
        name: float(statistics.median(row[i] for row in steady))
        for i, name in enumerate(STEP_PARTS)
        if steady
    }


def _steady_step_values(
    conn: Connection, sweep_ids: list[str], runs_taken: Comparable
) -> list[RunValue]:
    """Each compared run's median step time in seconds after warm-up (:func:`step_medians`)."""
    runs = conn.execute(
        select(Run.id, Run.world_size)
        .where(Run.sweep_id.in_(sweep_ids), *runs_taken.conditions())
        .order_by(Run.id)
    ).all()
    values: list[RunValue] = []
    for run_id, world_size in runs:
        medians = step_medians(conn, run_id)
        if medians:
            values.append((run_id, world_size, medians["steady_step_s"]))
    return values


def run_values(
    conn: Connection, sweep_ids: list[str], metric: str, runs_taken: Comparable
) -> list[RunValue]:
    """Every compared run's ``metric`` with its id and worker count, in the order of the
    runs' ids (:func:`metric_values` groups them by worker count)."""
    if metric in PER_REFERENCE:
        in_seconds = run_values(conn, sweep_ids, PER_REFERENCE[metric], runs_taken)
        references = dict(
            conn.execute(
                select(Run.id, Run.machine_reference_s).where(
                    Run.id.in_([run_id for run_id, _, _ in in_seconds]),
                    Run.machine_reference_s > 0,
                )
            ).all()
        )
        return [
            (run_id, world_size, value / references[run_id])
            for run_id, world_size, value in in_seconds
            if run_id in references
        ]
    if metric == "allreduce_largest_s":
        return _allreduce_values(conn, sweep_ids, runs_taken)
    if metric == "steady_step_s":
        return _steady_step_values(conn, sweep_ids, runs_taken)
    column = getattr(Run, metric)
    rows = conn.execute(
        select(Run.id, Run.world_size, column)
        .where(Run.sweep_id.in_(sweep_ids), column.is_not(None), *runs_taken.conditions())
        .order_by(Run.id)
    )
    return [(run_id, world_size, float(value)) for run_id, world_size, value in rows]


def metric_values(
    conn: Connection, sweep_ids: list[str], metric: str, runs_taken: Comparable
) -> dict[int, list[float]]:
    """Per worker count, the ``metric`` of every compared run (see :class:`Comparable`), in
    the order of the runs' ids: what the detector compares. A metric of
    :data:`~results_db.regressions.rules.PER_REFERENCE` takes only the runs that timed the
    machine's reference."""
    values: dict[int, list[float]] = defaultdict(list)
    for _, world_size, value in run_values(conn, sweep_ids, metric, runs_taken):
        values[world_size].append(value)
    return values
