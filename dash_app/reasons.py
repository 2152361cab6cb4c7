"""Why a figure, a table cell or a section has nothing to show, in words, from what the
queries returned: no runs at all; runs that failed, diverged or were cancelled; runs that
ended without reaching the goal; contended runs left out; runs still running; a run, task or
sweep without that measure.

Pure: runs (:class:`~results_db.queries.runs.RunInfo`, or anything with their ``status``,
``goal_reached``, ``time_to_accuracy_s``, ``contended``, ``steps``, ``world_size``) and
rows in, a sentence out. The pages choose their messages here, and the tests read them
without a browser.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from scalebench import units
from scalebench.statuses import (
    CANCELLED,
    DIVERGED,
    FAILED,
    NOT_ADMITTED,
    NOT_STARTED,
    PLANNED,
    PREEMPTED,
    RUNNING,
    SKIPPED,
    SUCCEEDED,
    TIMED_OUT,
    UNFINISHED,
)

# What became of a run, as a verb (one run, several runs). A run's status (scalebench.statuses)
# other than "succeeded", then what a succeeded run can have come to.
FATES: dict[str, tuple[str, str]] = {
    RUNNING: ("is still running", "are still running"),
    PLANNED: ("has not started yet", "have not started yet"),
    SKIPPED: (
        "was never started (the sweep was stopped first)",
        "were never started (the sweep was stopped first)",
    ),
    FAILED: ("failed", "failed"),
    DIVERGED: ("diverged", "diverged"),
    CANCELLED: ("was cancelled", "were cancelled"),
    TIMED_OUT: ("timed out", "timed out"),
    PREEMPTED: ("was preempted", "were preempted"),
    NOT_ADMITTED: (
        "was never admitted by the cluster's queue",
        "were never admitted by the cluster's queue",
    ),
    "unreached": ("ended without reaching the goal", "ended without reaching the goal"),
    "contended": (
        "was contended (other processes took its cores) and is left out",
        "were contended (other processes took their cores) and are left out",
    ),
    SUCCEEDED: ("succeeded", "succeeded"),
    "reached": ("reached the goal", "reached the goal"),
}


def fate(run: Any, goal: bool = True, leave_out_contended: bool = False) -> str:
    """What became of ``run``, a key of :data:`FATES` (or its status when no wording
    exists): its status unless it succeeded; with ``goal``, whether a succeeded run reached
    the goal; with ``leave_out_contended``, whether it is left out as contended."""
    if run.status != SUCCEEDED:
        return run.status
    if goal and not (run.goal_reached and run.time_to_accuracy_s is not None):
        return "unreached"
    if leave_out_contended and getattr(run, "contended", False):
        return "contended"
    return "reached" if goal else SUCCEEDED


def _verb(key: str, count: int) -> str:
    one, several = FATES.get(key, (f"ended {key}", f"ended {key}"))
    return one if count == 1 else several


def _and(parts: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def runs_phrase(
    runs: Sequence[Any], where: str = "", goal: bool = True, leave_out_contended: bool = False
) -> str:
    """What became of ``runs``, e.g. ``its 3 runs at 2 workers were contended (…) and are
    left out``, ``of its 2 runs, 1 failed and 1 diverged`` or ``no runs at 4 workers``
    (``where``: `` at 2 workers``, or empty for a whole sweep); see :func:`fate`."""
    if not runs:
        return f"no runs{where}"
    order = list(FATES)
    counts = Counter(fate(r, goal, leave_out_contended) for r in runs)
    keys = sorted(counts, key=lambda k: order.index(k) if k in order else len(order))
    if len(keys) == 1:
        noun = "its run" if len(runs) == 1 else f"its {len(runs)} runs"
        return f"{noun}{where} {_verb(keys[0], len(runs))}"
    listed = _and([f"{counts[k]} {_verb(k, counts[k])}" for k in keys])
    return f"of its {len(runs)} runs{where}, {listed}"


def needed_repeats(count: int) -> int:
    """How many of ``count`` repeats must reach the goal for MLPerf's rule to give a time
    (``results_db.analytics.converged_mean``): all but the slowest of three or more, else
    every one."""
    return count - 1 if count >= 3 else count


def no_time_to_accuracy(runs: Sequence[Any], where: str = "") -> str:
    """Why ``runs`` (of one configuration) give no time to accuracy: what became of them,
    and, where some reached the goal, that MLPerf's rule needs more of them."""
    started = [r for r in runs if r.status not in NOT_STARTED]
    phrase = runs_phrase(runs, where)
    reached = sum(fate(r) == "reached" for r in runs)
    if reached and started:
        phrase += f": MLPerf's rule needs {needed_repeats(len(started))} of {len(started)}"
    return phrase


def compare_gap(side: str, runs: Sequence[Any], world_size: int) -> str:
    """Why sweep ``side`` ("A" or "B") has no time to accuracy to test at ``world_size``
    workers, as the Compare table says it: its runs there that did not succeed, did not
    reach the goal, or were contended (those are left out of the test), or that it has none
    there, e.g. ``A: its 3 runs at 2 workers were contended (other processes took their
    cores) and are left out``."""
    at = [r for r in runs if r.world_size == world_size]
    return f"{side}: " + runs_phrase(at, f" at {units.workers(world_size)}", True, True)


def sweep_without_time(runs: Sequence[Any], rows: Sequence[Any] = ()) -> str:
    """The message of a figure of times to accuracy that has none: what became of the
    sweep's ``runs`` (or, without them, of its scaling ``rows``)."""
    if runs:
        running = any(fate(r) in UNFINISHED for r in runs)
        return f"No time to accuracy in this sweep{' yet' if running else ''}: " + (
            no_time_to_accuracy(runs) + "."
        )
    total = sum(r.runs for r in rows)
    if total:
        return f"No time to accuracy in this sweep: none of its {total} runs reached the goal."
    return "No time to accuracy: this sweep has no runs."


def no_baseline(measure: str, rows: Sequence[Any], runs: Sequence[Any] = ()) -> str:
    """Why ``measure`` ("speedup", "efficiency", "costs": each relative to one worker) cannot be
    drawn: the sweep ran no 1-worker group, or its 1-worker runs give no time to accuracy
    (what became of them; without ``runs``, how many of its scaling ``rows``' reached the
    goal)."""
    head = f"No {measure} without the time to accuracy of 1 worker"
    one = next((r for r in rows if r.world_size == 1), None)
    sizes = sorted({r.world_size for r in rows} | {r.world_size for r in runs})
    if not sizes:
        return f"{head}: this sweep has no runs."
    if one is None and not any(r.world_size == 1 for r in runs):
        ran = ", ".join(str(k) for k in sizes)
        return f"{head}: this sweep ran no 1-worker group (it ran {ran} workers)."
    at_one = [r for r in runs if r.world_size == 1]
    if at_one:
        return f"{head}: {no_time_to_accuracy(at_one, ' at 1 worker')}."
    assert one is not None
    return f"{head}: {one.reached} of its {one.runs} runs at 1 worker reached the goal."


def no_step_timings(runs: Sequence[Any]) -> str:
    """Why a sweep has no step timings: no runs, or runs that recorded no step (still
    running, not started, or ended before their first)."""
    if not runs:
        return "No step timings: this sweep has no runs."
    stepless = [r for r in runs if not getattr(r, "steps", 0)]
    if not stepless:
        return "No step timings with a communication phase in this sweep."
    phrase = runs_phrase(stepless, goal=False)
    return f"No step timings in this sweep: {phrase} before recording a step."


def no_phase_totals(runs: Sequence[Any]) -> str:
    """Why no phase totals to the goal: no run reached it (what became of the runs)."""
    if not runs:
        return "No time to the goal: this sweep has no runs."
    return f"No run of this sweep reached its goal: {no_time_to_accuracy(runs)}."


def no_allreduce_samples(rows: Sequence[Any], dtype: str, runs: Sequence[Any] = ()) -> str:
    """Why an all-reduce figure is empty: the sweeps measured other dtypes than ``dtype``,
    or none at all (what became of their ``runs``)."""
    measured = sorted({r.dtype for r in rows})
    if measured and dtype not in ("all", *measured):
        return (
            f"No {dtype} samples: the chosen sweeps measured {', '.join(measured)} only; "
            "choose another dtype."
        )
    if not runs:
        return "No all-reduce samples: the chosen sweeps have no runs."
    return f"No all-reduce samples: {runs_phrase(runs, goal=False)}."


def run_without(run: Any, what: str) -> str:
    """Why one run has no ``what`` ("training step", "evaluation", "event"): it has not
    started, is still running, or ended before the first (with its reason); a run of a task
    without that measure says so."""
    status = run.status
    reason = f" ({run.reason})" if getattr(run, "reason", "") else ""
    if what == "evaluation" and not getattr(run, "goal_metric", None):
        return "No evaluation: this run's task has no validation metric."
    if status in NOT_STARTED:
        return f"No {what}: the run {_verb(status, 1)}."
    if status == RUNNING:
        return f"No {what} recorded yet: the run is still running (the page refreshes)."
    if status != SUCCEEDED:
        return f"No {what} recorded: the run {_verb(status, 1)} before recording one{reason}."
    return f"No {what} recorded by this run."


def no_trend(points: Sequence[Any], metric: str) -> str:
    """Why the nightly trend of ``metric`` (a key of :data:`scalebench.units.MEASURES`) is
    empty: no nightly sweep of the task in the nights shown, none of their runs succeeded,
    or their runs give no value of it (time to accuracy: too few reached the goal; another
    measure: the task does not record it)."""
    measure, unit = units.MEASURES[metric]
    if not points:
        return "No nightly (scheduled) sweep of this task in the nights shown."
    nights = len({p.sweep_id for p in points})
    runs = sum(p.runs for p in points)
    succeeded = sum(p.succeeded for p in points)
    counted = f"{nights} night(s), {runs} run(s)"
    if not succeeded:
        return f"No {measure}: none of the nightly runs succeeded ({counted})."
    if metric == "time_to_accuracy_s":
        return (
            f"No {measure}: too few of the nightly runs reached the goal "
            f"({succeeded} of {runs} succeeded over {nights} night(s))."
        )
    return f"No {measure}: this task's runs record no {measure} in {unit} ({counted})."


def projection_gap(missing: Sequence[str], runs: Sequence[Any], projected: bool) -> str:
    """What a projection could not do (``missing``: the query's sentences), and, where it
    projected nothing (``projected`` false) from a sweep none of whose ``runs`` succeeded,
    what became of them."""
    said = " ".join(missing)
    if projected or any(r.status == SUCCEEDED for r in runs):
        return said
    fates = runs_phrase(runs, goal=False) if runs else "this sweep has no runs"
    return f"{said.rstrip('.')}: {fates}." if said else f"Nothing to project: {fates}."


def no_sweep(kind: str, chosen: Sequence[str], found: Sequence[str], stored: int) -> str:
    """Why no ``kind`` sweep ("all-reduce", "training") is shown: none in the database yet,
    none chosen, or the chosen ones are not in it."""
    gone = [c for c in chosen if c not in found]
    if gone:
        return f"There is no {kind} sweep {gone[0]!r} in the database."
    if not stored:
        return f"No {kind} sweep in the database yet."
    return f"No {kind} sweep chosen."
