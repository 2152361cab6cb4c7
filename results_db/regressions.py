"""Nightly regression detection: did the latest nightly get slower than its baseline?

For each worker count of the latest scheduled sweep, its runs are compared
with the runs of the same configuration (task, light, backend, variant,
precision) in up to ``Rule.window`` earlier scheduled sweeps. A configuration
is flagged only when both hold:

- the difference is **significant**: a one-sided Mann–Whitney U test
  (``p < Rule.alpha``) says the latest values are worse, and
- it is **large enough**: the mean moved by at least ``Rule.min_change``
  (0.05 = 5 %) in the bad direction.

:data:`RULE` holds the defaults; the nightly DAG, ``scalebench db regressions``
and the dashboard's Compare page read them from here.

Metrics (:data:`METRICS`, lower is better): time to accuracy and
``steady_step_s``, a training run's median step time after its first
:data:`WARMUP_STEPS` steps (each step's slowest rank), both divided by the
run's ``machine_reference_s`` (:data:`PER_REFERENCE`): a fixed workload each
rank times at its start and end (:mod:`workers.machine_reference`), so that a
host that got slower since last week is not taken for slower code. Where the
baseline's runs were stored before the reference was timed, the same metrics
are judged in seconds. For the all-reduce task, ``allreduce_largest_s``: a
run's median over repetitions of the slowest rank's time for its largest
``float32`` message. :data:`MEASURES` adds training throughput in samples/s
(higher is better) and the metrics' other forms, which the nightly does not
judge but the power benchmark can.

Only comparable runs are compared. Runs marked ``contended`` (other processes
took more than the threshold's share of their cores, see
:func:`results_db.analytics.contention_share`) are left out on both sides, and
baseline runs on other hardware than the latest sweep's (a different processor
or GPU) too; baseline runs from before the hardware was recorded are kept.
Each finding says how many runs it left out.

A rank test needs several latest repeats to reach a small p: with one latest
run among 21 baseline runs the smallest possible p is 1/22 ≈ 0.045, so a
single noisy point never raises an alarm at the default ``alpha = 0.01``.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import ColumnElement, Connection, delete, func, insert, or_, select

from results_db.models import AllReduceSample, Regression, Run, StepTiming, Sweep
from scalebench.tasks import TASKS, AllReduceSpec

# Every metric the detector can compute -> True when a larger value is better.
MEASURES = {
    "time_to_accuracy_s": False,
    "samples_per_s": True,
    "steady_step_s": False,
    "allreduce_largest_s": False,
    "time_to_accuracy_per_reference": False,
    "steady_step_per_reference": False,
    "allreduce_largest_per_reference": False,
}
# Metrics relative to the machine's speed: the metric in seconds divided by the run's
# ``machine_reference_s`` (both in seconds, so the ratio has no unit), for runs that timed it.
PER_REFERENCE = {
    "time_to_accuracy_per_reference": "time_to_accuracy_s",
    "steady_step_per_reference": "steady_step_s",
    "allreduce_largest_per_reference": "allreduce_largest_s",
}
# Steps at the start of a run that ``steady_step_s`` leaves out.
WARMUP_STEPS = 10
# Fewer baseline runs than this at a worker count: nothing is judged there.
MIN_BASELINE_RUNS = 3
# The metrics the nightly judges, a subset of MEASURES.
# Time to accuracy and the steady step time are judged relative to the machine's reference
# workload: a virtual machine's speed drifts by a third within the hour, which drowns a 10 %
# change of the code in seconds (docs/benchmarks.md, "How sensitive the nightly is"). Where
# the baseline has fewer than MIN_BASELINE_RUNS runs that timed the reference (runs stored
# before it was timed), the same metric is judged in seconds instead.
# Whole-run samples/s is not among them: it counts the warm-up, evaluation and the time between
# steps, spreads more from run to run, and on the same measured nights flagged none of those 10 %
# slower that steady_step_s flagged.
METRICS = {
    "time_to_accuracy_per_reference": False,
    "steady_step_per_reference": False,
    "allreduce_largest_s": False,
}


@dataclass(frozen=True)
class Rule:
    """When a sweep counts as a regression of its baseline."""

    window: int = 7  # earlier scheduled sweeps of the configuration compared
    alpha: float = 0.01  # significance level of the one-sided Mann–Whitney U test
    min_change: float = 0.05  # relative worsening of the mean (0.05 = 5 %)
    min_baseline_sweeps: int = 2  # fewer earlier sweeps: nothing to compare with

    def describe(self) -> str:
        """The rule in words, e.g. for the nightly DAG's documentation."""
        return (
            f"a one-sided Mann–Whitney U test gives p < {self.alpha:g} and the mean is at "
            f"least {self.min_change * 100:g} % worse than over the last {self.window} "
            "scheduled sweeps of the same configuration (contended runs, and earlier runs on "
            "other hardware, left out)"
        )


RULE = Rule()

# When a sweep happened, for the nightly's history: the night a scheduled sweep stands for
# (its run's logical date: a backfilled night sits among the nights, not at today), else
# when it was created.
NIGHT = func.coalesce(Sweep.night, Sweep.created_at)


@dataclass(frozen=True)
class Finding:
    """One (worker count, metric) of the latest sweep against its baseline."""

    world_size: int
    metric: str
    baseline_mean: float
    latest_mean: float | None  # None: no latest run produced this metric
    change: float | None  # relative, positive = worse
    p_value: float | None
    baseline_runs: int
    latest_runs: int
    flagged: bool
    reason: str = ""
    network: str = "host"  # the link profile the runs compared ran on
    left_out: str = ""  # the runs not compared and why, e.g. "2 contended runs left out"


@dataclass(frozen=True)
class NotJudged:
    """A worker count (or the whole sweep, ``world_size`` None) the detector could not judge,
    and why: how many runs were usable on each side, how many were left out and for what."""

    world_size: int | None
    network: str
    reason: str

    def describe(self) -> str:
        """One line, e.g. ``  1 worker(s): not judged: 0 of 15 baseline runs usable ...``."""
        where = "" if self.network == "host" else f" on the {self.network} network"
        size = "every size" if self.world_size is None else f"{self.world_size:3d} worker(s)"
        return f"not judged {size}{where}: {self.reason}"


@dataclass(frozen=True)
class Detection:
    """What the detector made of a sweep: a finding per (worker count, metric) it judged,
    and what it could not judge, with the reason."""

    findings: list[Finding]
    not_judged: list[NotJudged]


@dataclass(frozen=True)
class Comparable:
    """Which runs a comparison takes: those on ``network``, not ``contended``, and (where
    ``hardware`` is given) on that hardware or on hardware not recorded."""

    network: str
    hardware: str | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        keep = [Run.status == "succeeded", Run.network == self.network, Run.contended.is_(False)]
        if self.hardware is not None:
            keep.append(or_(Run.hardware == self.hardware, Run.hardware.is_(None)))
        return keep

    def left_out(self, conn: Connection, sweep_ids: list[str], world_size: int) -> tuple[int, int]:
        """(contended runs, runs on other hardware) of ``sweep_ids`` at ``world_size`` that
        succeeded on ``network`` but are not compared."""
        base = (Run.sweep_id.in_(sweep_ids), Run.status == "succeeded")
        base += (Run.network == self.network, Run.world_size == world_size)
        contended = conn.execute(
            select(func.count()).select_from(Run).where(*base, Run.contended.is_(True))
        ).scalar_one()
        other = 0
        if self.hardware is not None:
            other = conn.execute(
                select(func.count())
                .select_from(Run)
                .where(
                    *base,
                    Run.contended.is_(False),
                    Run.hardware.is_not(None),
                    Run.hardware != self.hardware,
                )
            ).scalar_one()
        return contended, other


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


def _steady_step_values(
    conn: Connection, sweep_ids: list[str], runs_taken: Comparable
) -> list[RunValue]:
    """Each compared run's median step time in seconds after warm-up.

    A step's time is its slowest rank's sum of phase seconds (the group waits for that rank).
    The run's first :data:`WARMUP_STEPS` steps are left out (its very first step takes about a
    third longer than the rest), unless that would leave none. Unlike whole-run samples/s,
    the figure leaves out evaluation and the time between steps, and a median is not moved by
    a few steps that other work on the machine slowed down.
    """
    runs = conn.execute(
        select(Run.id, Run.world_size)
        .where(Run.sweep_id.in_(sweep_ids), *runs_taken.conditions())
        .order_by(Run.id)
    ).all()
    seconds = (
        StepTiming.data_s
        + StepTiming.forward_s
        + StepTiming.loss_s
        + StepTiming.backward_s
        + StepTiming.gradient_packing_s
        + StepTiming.communication_s
        + StepTiming.optimizer_s
    )
    values: list[RunValue] = []
    for run_id, world_size in runs:
        steps = [
            float(step_s)
            for step_s in conn.execute(
                select(func.max(seconds))
                .where(StepTiming.run_id == run_id)
                .group_by(StepTiming.epoch, StepTiming.step)
                .order_by(StepTiming.epoch, StepTiming.step)
            ).scalars()
        ]
        if steps:
            values.append((run_id, world_size, statistics.median(steps[WARMUP_STEPS:] or steps)))
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
    :data:`PER_REFERENCE` takes only the runs that timed the machine's reference."""
    values: dict[int, list[float]] = defaultdict(list)
    for _, world_size, value in run_values(conn, sweep_ids, metric, runs_taken):
        values[world_size].append(value)
    return values


def compare(
    baseline: list[float],
    latest: list[float],
    higher_is_better: bool,
    rule: Rule = RULE,
) -> tuple[float, float, bool]:
    """(relative change, p-value, flagged) of ``latest`` against ``baseline``.

    The change is positive when ``latest`` is worse.
    """
    from scipy.stats import mannwhitneyu  # imported here: the DAG files read RULE

    base_mean, latest_mean = statistics.fmean(baseline), statistics.fmean(latest)
    change = (latest_mean - base_mean) / base_mean
    if higher_is_better:
        change = -change
    alternative = "less" if higher_is_better else "greater"
    p_value = float(mannwhitneyu(latest, baseline, alternative=alternative).pvalue)
    return change, p_value, p_value < rule.alpha and change >= rule.min_change


def detect(
    conn: Connection,
    sweep_id: str,
    rule: Rule = RULE,
) -> list[Finding]:
    """Compare sweep ``sweep_id`` with up to ``rule.window`` earlier scheduled sweeps."""
    return judge(conn, sweep_id, rule).findings


def judge(conn: Connection, sweep_id: str, rule: Rule = RULE) -> Detection:
    """Compare sweep ``sweep_id`` with up to ``rule.window`` earlier scheduled sweeps, and
    say what could not be compared and why (too few earlier nights, or too few usable runs
    at a worker count: how many were contended or on other hardware)."""
    latest = conn.execute(
        select(Sweep.task, Sweep.config_hash, NIGHT.label("night")).where(Sweep.id == sweep_id)
    ).one()
    baseline_ids = list(
        conn.execute(
            select(Sweep.id)
            .where(
                Sweep.task == latest.task,
                Sweep.config_hash == latest.config_hash,
                Sweep.trigger == "scheduled",
                latest.night > NIGHT,
                Sweep.id != sweep_id,
            )
            .order_by(NIGHT.desc())
            .limit(rule.window)
        ).scalars()
    )
    networks = sorted(
        conn.execute(select(Run.network).where(Run.sweep_id == sweep_id).distinct()).scalars()
    )
    if len(baseline_ids) < rule.min_baseline_sweeps:
        reason = (
            f"{len(baseline_ids)} earlier scheduled night(s) of this configuration; the "
            f"comparison needs {rule.min_baseline_sweeps}"
        )
        return Detection([], [NotJudged(None, n, reason) for n in networks or ["host"]])
    findings: list[Finding] = []
    not_judged: list[NotJudged] = []
    metrics = judged_metrics(latest.task)
    for network in networks:  # each profile is its own configuration
        found, skipped = _network_findings(conn, sweep_id, baseline_ids, network, rule, metrics)
        findings += found
        not_judged += skipped
    return Detection(findings, not_judged)


def _hardware(conn: Connection, sweep_id: str, network: str) -> str | None:
    """The hardware most of the sweep's runs on ``network`` ran on (None: not recorded)."""
    return conn.execute(
        select(Run.hardware)
        .where(Run.sweep_id == sweep_id, Run.network == network, Run.hardware.is_not(None))
        .group_by(Run.hardware)
        .order_by(func.count().desc(), Run.hardware)
        .limit(1)
    ).scalar()


def left_out_text(latest_contended: int, baseline_contended: int, other_hardware: int) -> str:
    """What a comparison left out, in words ("" when nothing)."""
    parts = []
    if latest_contended:
        parts.append(f"{latest_contended} contended latest run(s)")
    if baseline_contended:
        parts.append(f"{baseline_contended} contended baseline run(s)")
    if other_hardware:
        parts.append(f"{other_hardware} baseline run(s) on other hardware")
    return f"left out: {', '.join(parts)}" if parts else ""


# (latest, baseline) values of one metric, per worker count
_Values = tuple[dict[int, list[float]], dict[int, list[float]]]


def judged_metrics(task: str) -> dict[str, bool]:
    """The metrics of :data:`METRICS` that a sweep of ``task`` measures: the all-reduce's for
    the all-reduce task, the training ones for a training task (all, for a task not known)."""
    spec = TASKS.get(task)
    if spec is None:
        return METRICS
    allreduce = isinstance(spec, AllReduceSpec)
    return {m: b for m, b in METRICS.items() if (m == "allreduce_largest_s") == allreduce}


def _network_findings(
    conn: Connection,
    sweep_id: str,
    baseline_ids: list[str],
    network: str,
    rule: Rule,
    metrics: dict[str, bool],
) -> tuple[list[Finding], list[NotJudged]]:
    attempted = set(
        conn.execute(
            select(Run.world_size).where(Run.sweep_id == sweep_id, Run.network == network)
        ).scalars()
    )
    latest_taken = Comparable(network)
    baseline_taken = Comparable(network, _hardware(conn, sweep_id, network))

    def left_out(world_size: int) -> tuple[int, str]:
        """The latest night's contended runs at ``world_size``, and all that was left out."""
        contended, _ = latest_taken.left_out(conn, [sweep_id], world_size)
        others = baseline_taken.left_out(conn, baseline_ids, world_size)
        return contended, left_out_text(contended, *others)

    def values(metric: str) -> _Values:
        """(latest, baseline) values of ``metric`` per worker count."""
        return (
            metric_values(conn, [sweep_id], metric, latest_taken),
            metric_values(conn, baseline_ids, metric, baseline_taken),
        )

    findings = []
    not_judged: list[NotJudged] = []
    for judged, higher_is_better in metrics.items():
        judged_values = values(judged)
        in_seconds = values(PER_REFERENCE[judged]) if judged in PER_REFERENCE else None
        for world_size in sorted(attempted):
            metric, (latest_values, baseline_values) = _compared_metric(
                judged, judged_values, in_seconds, world_size
            )
            base = baseline_values.get(world_size, [])
            now = latest_values.get(world_size, [])
            if len(base) < MIN_BASELINE_RUNS:
                unjudged = NotJudged(
                    world_size,
                    network,
                    _too_few_text(
                        len(base),
                        len(now),
                        latest_taken.left_out(conn, [sweep_id], world_size)[0],
                        *baseline_taken.left_out(conn, baseline_ids, world_size),
                        len(baseline_ids),
                    ),
                )
                if unjudged not in not_judged:  # the same counts for every metric
                    not_judged.append(unjudged)
                continue
            if not now:
                # The nightly ran this size but no run produced the metric (failed,
                # diverged, goal missed) while the baseline did; runs that were all
                # contended say nothing either way.
                findings.append(
                    _no_comparable_run(world_size, metric, base, network, *left_out(world_size))
                )
                continue
            change, p_value, flagged = compare(base, now, higher_is_better, rule)
            findings.append(
                Finding(
                    world_size=world_size,
                    metric=metric,
                    baseline_mean=statistics.fmean(base),
                    latest_mean=statistics.fmean(now),
                    change=change,
                    p_value=p_value,
                    baseline_runs=len(base),
                    latest_runs=len(now),
                    flagged=flagged,
                    network=network,
                    left_out=left_out(world_size)[1],
                )
            )
    return findings, not_judged


def _too_few_text(
    baseline_runs: int,
    latest_runs: int,
    latest_contended: int,
    baseline_contended: int,
    other_hardware: int,
    nights: int,
) -> str:
    """Why a worker count was not judged: its usable baseline runs over ``nights`` earlier
    nights are fewer than :data:`MIN_BASELINE_RUNS`, and what was left out of them."""
    considered = baseline_runs + baseline_contended + other_hardware
    why = [
        f"{baseline_contended} contended" if baseline_contended else "",
        f"{other_hardware} on other hardware" if other_hardware else "",
    ]
    left = f" ({', '.join(w for w in why if w)} left out)" if any(why) else ""
    latest = f"; this night: {latest_runs} usable run(s)"
    if latest_contended:
        latest += f", {latest_contended} contended left out"
    return (
        f"{baseline_runs} of {considered} successful baseline run(s) of {nights} earlier "
        f"night(s) usable{left}, the comparison needs {MIN_BASELINE_RUNS}{latest}"
    )


def judged_in_seconds(baseline_runs: int, latest_runs: int, latest_runs_in_seconds: int) -> bool:
    """Whether a metric of :data:`PER_REFERENCE` is judged in seconds instead, given how many
    baseline and latest runs timed the machine's reference and how many latest runs have the
    seconds: where the baseline has too few (runs stored before the reference was timed, or
    runs on a GPU, which never time it), or only the latest night's runs in seconds exist."""
    return baseline_runs < MIN_BASELINE_RUNS or (latest_runs_in_seconds > 0 and latest_runs == 0)


def _compared_metric(
    judged: str, judged_values: _Values, in_seconds: _Values | None, world_size: int
) -> tuple[str, _Values]:
    """The metric compared at ``world_size``, and its values: ``judged``, or its time in
    seconds (``in_seconds``, :data:`PER_REFERENCE`) where :func:`judged_in_seconds` says."""
    latest_values, baseline_values = judged_values
    if in_seconds is not None and judged_in_seconds(
        len(baseline_values.get(world_size, [])),
        len(latest_values.get(world_size, [])),
        len(in_seconds[0].get(world_size, [])),
    ):
        return PER_REFERENCE[judged], in_seconds
    return judged, judged_values


def _no_comparable_run(
    world_size: int, metric: str, base: list[float], network: str, contended: int, left: str
) -> Finding:
    """The finding where the baseline has runs of ``metric`` at ``world_size`` and the latest
    night none: flagged unless its ``contended`` runs were left out (``left`` says what was)."""
    return Finding(
        world_size,
        metric,
        statistics.fmean(base),
        None,
        None,
        None,
        len(base),
        0,
        contended == 0,
        "no comparable run: the successful ones were contended"
        if contended
        else "no successful run; the baseline had some",
        network,
        left,
    )


def _with_network(finding: Finding) -> str:
    """A finding's reason, naming its network profile where it is not the host's."""
    where = f"on the {finding.network} network" if finding.network != "host" else ""
    return "; ".join(part for part in (finding.reason, where, finding.left_out) if part)


def record(conn: Connection, sweep_id: str, findings: list[Finding]) -> int:
    """Store the flagged findings of ``sweep_id`` (replacing earlier ones); returns how many."""
    sweep = conn.execute(select(Sweep.task, Sweep.config_hash).where(Sweep.id == sweep_id)).one()
    conn.execute(delete(Regression).where(Regression.sweep_id == sweep_id))
    flagged = [f for f in findings if f.flagged]
    if flagged:
        now = datetime.now(UTC)
        conn.execute(
            insert(Regression),
            [
                {
                    "sweep_id": sweep_id,
                    "task": sweep.task,
                    "config_hash": sweep.config_hash,
                    "world_size": f.world_size,
                    "metric": f.metric,
                    "baseline_mean": f.baseline_mean,
                    "latest_mean": f.latest_mean,
                    "change": f.change,
                    "p_value": f.p_value,
                    "reason": _with_network(f),
                    "flagged_at": now,
                }
                for f in flagged
            ],
        )
    return len(flagged)
