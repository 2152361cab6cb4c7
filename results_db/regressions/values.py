"""The values the detector compares, read from the database: each compared run's metric.

Time to accuracy is a column of the run; ``steady_step_s`` and ``allreduce_largest_s`` are
computed from the run's step timings and all-reduce samples; a metric of
:data:`~results_db.regressions.rules.PER_REFERENCE` is the metric in seconds divided by the
run's ``machine_reference_s``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

from sqlalchemy import Connection, func, select

from results_db.models import AllReduceSample, Run, StepTiming
from results_db.regressions.comparable import Comparable
from results_db.regressions.rules import PER_REFERENCE

# Steps at the start of a run that ``steady_step_s`` leaves out.
WARMUP_STEPS = 10
# Steps of a stretch whose median :func:`quiet_median` compares with the run's other
# stretches: light Task 2a's 25 steps are about 20 ms, ResNet-20's on a CPU a few seconds.
QUIET_WINDOW_STEPS = 25

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
# A step's own work: every phase but communication, in the order the step runs them.
_OWN_WORK = (
    StepTiming.data_s
    + StepTiming.forward_s
    + StepTiming.loss_s
    + StepTiming.backward_s
    + StepTiming.gradient_packing_s
    + StepTiming.optimizer_s
)
# What :func:`steady_seconds` reads of each step, in seconds, each over the step's ranks: the
# slowest rank's, the group waits for it; communication the last rank to reach the collective:
# its seconds there are the collective's own, where a rank that came earlier also waited for
# it (that wait stays in the step, beyond its own work).
STEP_COLUMNS = {
    "step": func.max(_OWN_WORK + StepTiming.communication_s),
    "own_work": func.max(_OWN_WORK),
    "compute_s": func.max(_COMPUTE),
    "communication_s": func.min(StepTiming.communication_s),
    "data_s": func.max(StepTiming.data_s),
}
# What :func:`steady_seconds` gives, seconds: the steady step and its phases.
STEP_PARTS = ("steady_step_s", "compute_s", "communication_s", "data_s")


def quiet_median(values: Sequence[float], window: int = QUIET_WINDOW_STEPS) -> float:
    """The median of ``values`` in their quietest stretch: cut into consecutive windows of
    ``window`` values (a last, shorter one joins the one before it), the lowest window
    median; the median of all where there are fewer than two windows. Seconds in, seconds
    out. ValueError for no values."""
    if not values:
        raise ValueError("quiet_median: no values")
    count = len(values) // window
    if count < 2:
        return float(statistics.median(values))
    cuts = [i * window for i in range(count)] + [len(values)]
    return float(min(statistics.median(values[start:end]) for start, end in pairwise(cuts)))


def evaluation_seconds(in_order: list[float]) -> float:
    """A run's evaluation, from its evaluations' seconds in the order they ran (0.0: none):
    the lower median of those after the first, which warms up (its first launches and
    allocations: on an H200, 50 to 74 ms against 5 to 8 ms for the next ones), or the one
    evaluation of a run that made one. Of two, the lower median is the quicker: one busy
    moment does not move it."""
    timed = in_order[1:] or in_order
    return statistics.median_low(timed) if timed else 0.0


def steady_parts(
    step: Sequence[float],
    own_work: Sequence[float],
    compute: Sequence[float],
    communication: Sequence[float],
    data: Sequence[float],
) -> dict[str, float]:
    """The steady step and its phases (seconds, :data:`STEP_PARTS`) from each steady step's
    seconds over its ranks (:data:`STEP_COLUMNS`), step by step: the whole step, its own work
    (every phase but communication), compute, communication and data.

    - Work on the processor (the step's own work, compute, data) is taken in the run's
      quietest stretch (:func:`quiet_median`): a virtual machine's speed changes under a
      run for seconds at a time (the same light step took 0.29 to 0.69 ms in half-second
      stretches of one process), other work only adds time, and the quietest stretch is
      the one nearest what the code costs.
    - Communication is taken as its mean: which rank reaches the all-reduce last changes
      from step to step, and so do its seconds there, and a median or a quiet stretch jumps
      between levels where the mean moves with how often each comes.
    - The steady step is the quiet stretch of its own work plus the mean of the rest of the
      step (the whole step's seconds beyond its own work: the communication it waited on).

    Measured on paired rounds in docs/benchmarks.md ("The steady step, as the nightly
    reads it"). ValueError for no steps.
    """
    waited = [max(whole - own, 0.0) for whole, own in zip(step, own_work, strict=True)]
    return {
        "steady_step_s": quiet_median(own_work) + statistics.fmean(waited),
        "compute_s": quiet_median(compute),
        "communication_s": statistics.fmean(communication),
        "data_s": quiet_median(data),
    }


def steady_seconds(conn: Connection, run_id: str) -> dict[str, float]:
    """The run's steady step and phases after warm-up (seconds, :func:`steady_parts`);
    empty for a run without steps.

    A step's time (and each phase's) is its slowest rank's, the group waits for that rank;
    its communication is the least any rank spent in the collective (:data:`STEP_COLUMNS`).
    The run's first :data:`WARMUP_STEPS` steps are left out (its very first step takes about a
    third longer than the rest), unless that would leave none. Unlike whole-run samples/s,
    the figures leave out evaluation and the time between steps.
    """
    rows = conn.execute(
        select(*STEP_COLUMNS.values())
        .where(StepTiming.run_id == run_id)
        .group_by(StepTiming.epoch, StepTiming.step)
        .order_by(StepTiming.epoch, StepTiming.step)
    ).all()
    steady = rows[WARMUP_STEPS:] or rows
    if not steady:
        return {}
    return steady_parts(*([float(row[i]) for row in steady] for i in range(len(STEP_COLUMNS))))


def _steady_step_values(
    conn: Connection, sweep_ids: list[str], runs_taken: Comparable
) -> list[RunValue]:
    """Each compared run's steady step time in seconds after warm-up (:func:`steady_seconds`)."""
    runs = conn.execute(
        select(Run.id, Run.world_size)
        .where(Run.sweep_id.in_(sweep_ids), *runs_taken.conditions())
        .order_by(Run.id)
    ).all()
    values: list[RunValue] = []
    for run_id, world_size in runs:
        steady = steady_seconds(conn, run_id)
        if steady:
            values.append((run_id, world_size, steady["steady_step_s"]))
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
