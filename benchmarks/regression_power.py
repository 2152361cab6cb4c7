"""How sensitive the nightly regression detector is: slowed nights flagged, unmodified ones not.

What it runs (real runs, on this machine, one after another):

- light Task 1a at 1 worker and light Task 0 at 2 workers, as the nightly runs them: each
  night is one sweep ``scalebench run <task> --light --repeats 3`` (seeds 0, 1, 2, as every
  night). ``--nights`` unmodified nights per task, and for every slowdown (``--slowdowns``,
  default 5, 10 and 20 %) ``--slowed-nights`` slowed ones, in rounds: each round runs one
  night of every kind still wanted, so the machine's drift over the hours falls on every
  kind alike. A slowed night is the same command with ``benchmarks/slowdown`` on the ranks'
  ``PYTHONPATH``: its ``sitecustomize`` adds busy work to each training step's data phase,
  or after each all-reduce, of that fraction of its time. The product has no such flag.
- ``--trials`` judgements per case: a baseline of the detector's window (7 nights) drawn
  from the unmodified nights, and a latest night, either an unmodified one left out of
  that baseline or a slowed one. Each night is judged by the detector's own rule
  (:func:`results_db.regressions.compare` with ``RULE``) on the detector's own metrics
  (:func:`results_db.regressions.metric_values` with ``METRICS``: time to accuracy and the
  steady step time, each relative to the run's machine reference, for Task 1a, the largest
  all-reduce's time for Task 0), contended runs left out as it leaves them out. A night is
  flagged when any metric is. The same draws are repeated 1,000 times for a finer rate.
- ``--night-runs N`` judges nights of N runs instead of the stored sweeps: each kind's runs,
  in the order they ran, taken N at a time. One set of runs then says how sensitive the
  nightly would be at several repeat counts (runs of one kind are alike whichever sweep ran
  them: the same command, seeds 0, 1, 2).

``--data DIR`` keeps the nights (runs, ``results.db`` and ``nights.jsonl``, one line per
night) and adds new ones to those already there; ``--judge-only`` runs nothing and judges
the nights stored in ``DIR``; ``--also`` judges the same nights by more metrics, each alone
or several together (``a+b``: flagged when any is)
(any of :data:`results_db.regressions.MEASURES`, e.g. ``samples_per_s``, the metric the
nightly judged before), so metrics are compared on the very same runs.

``--smoke`` runs the fewest nights the detector can judge, in a temporary folder, then the
same table, no goal judged: light Task 0 only (unless ``--tasks`` names others), judged as
nights of one run (``--night-runs 1``) at one worker: one unmodified sweep of 8 runs (the
window and one more) and one slowed by 10 % of one run, in one round, one trial. Task 0's
runs time only ``float32`` sizes up to 1,000 elements, 2 repetitions each (the metric takes
the largest size there is), and no run counts as contended
(``SCALEBENCH_CONTENTION_THRESHOLD=1``), so the detector's comparison runs however busy the
machine is; about half a minute.

Prints per task, metric set and case how many of the trials were flagged (goal: at least 9
of 10 slowed nights at 10 %, at most 1 of 10 unmodified nights) and how many of them had a
latest night with any run that was not contended (the others cannot be flagged), the
measured change of the
last metric's mean against the unmodified pool (what the busy work really cost), the runs'
spread and how many runs were left out as contended. Units: seconds, samples/s. Needs a
quiet machine: other work makes runs contended, and the detector leaves those out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from sqlalchemy import select

from results_db import regressions
from results_db.database import make_engine
from results_db.models import Run

ROOT = Path(__file__).resolve().parents[1]
SLOWDOWN_PATH = Path(__file__).resolve().with_name("slowdown")
MANIFEST = "nights.jsonl"  # one JSON line per night run: task, slowdown, sweep, seconds
GROUP_LOADED = re.compile(r"^\[\d+/\d+\] \S+: \w+, ")  # "[3/27] <run id>: succeeded, 9,739 rows"


@dataclass(frozen=True)
class Case:
    """One task as the nightly runs it: its worker count and the metrics the detector reads."""

    task: str
    workers: int
    metrics: tuple[str, ...]


CASES = (
    Case(
        "task1a-resnet20-cifar10",
        1,
        tuple(m for m in regressions.METRICS if not m.startswith("allreduce_")),
    ),
    Case("task0-allreduce", 2, tuple(m for m in regressions.METRICS if m.startswith("allreduce_"))),
)
SMOKE_TASK = "task0-allreduce"  # a light run takes seconds; a light Task 1a run, minutes


# the smoke's Task 0 runs: the float32 sizes up to 1,000 elements, 2 timed repetitions each
SMOKE_RUN_OPTIONS = ("--max-elements", "1000", "--repetitions", "2", "--dtype", "float32")


def run_night(
    case: Case,
    repeats: int,
    slowdown: float,
    results: Path,
    database: str,
    smoke: bool = False,
) -> float:
    """One night of ``case``: a sweep of ``repeats`` runs (slowed by ``slowdown``, 0: not);
    returns its wall-clock seconds. ``smoke``: Task 0's smallest sizes, and no run stored
    as contended."""
    env = dict(os.environ)
    if smoke:
        env["SCALEBENCH_CONTENTION_THRESHOLD"] = "1"
    if slowdown:
        paths = [str(SLOWDOWN_PATH), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["SCALEBENCH_BENCH_SLOWDOWN"] = str(slowdown)
    began = time.perf_counter()
    command = [sys.executable, "-m", "cli.main", "run", case.task, "--light"]
    command += ["--workers", str(case.workers), "--repeats", str(repeats)]
    command += ["--results", str(results), "--data-dir", str(results.parent / "data")]
    command += ["--database", database]
    if smoke and case.task == SMOKE_TASK:
        command += SMOKE_RUN_OPTIONS
    tail: deque[str] = deque(maxlen=40)
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=env
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line)
            if GROUP_LOADED.match(line):  # one line per run, as the command line loads it
                print(f"    {line.rstrip()} ({time.perf_counter() - began:.0f} s)", flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"{case.task} slowed by {slowdown:.0%} failed:\n{''.join(tail)}")
    return time.perf_counter() - began


RunRecord = tuple[dict[str, float], bool]  # one run: its value of each metric, contended


def sweep_runs(
    database: str, sweep_id: str, case: Case, metrics: tuple[str, ...]
) -> list[RunRecord]:
    """A stored night's runs at the case's worker count that succeeded on the host, in run
    order: each run's value of each of ``metrics`` as the detector takes it (none for a
    contended run, which the detector leaves out), and whether it was contended."""
    engine = make_engine(database)
    taken = regressions.Comparable("host")
    with engine.connect() as conn:
        runs = conn.execute(
            select(Run.id, Run.contended)
            .where(
                Run.sweep_id == sweep_id,
                Run.world_size == case.workers,
                Run.status == "succeeded",
                Run.network == "host",
            )
            .order_by(Run.id)
        ).all()
        by_metric = {
            metric: {
                run_id: value
                for run_id, _, value in regressions.run_values(conn, [sweep_id], metric, taken)
            }
            for metric in metrics
        }
    engine.dispose()
    return [
        ({m: by_metric[m][run_id] for m in metrics if run_id in by_metric[m]}, contended)
        for run_id, contended in runs
    ]


def nights_of(
    sweeps: list[list[RunRecord]], metrics: tuple[str, ...], night_runs: int | None
) -> list[tuple[dict[str, list[float]], int]]:
    """Nights to judge, each as its values per metric and how many of its runs were
    contended: each stored sweep (``night_runs`` None), or every ``night_runs`` consecutive
    runs of the sweeps in run order (the runs left over are not judged)."""
    if night_runs is None:
        groups = sweeps
    else:
        runs = [run for sweep in sweeps for run in sweep]
        groups = [
            runs[i : i + night_runs] for i in range(0, len(runs) - night_runs + 1, night_runs)
        ]
    return [
        (
            {m: [values[m] for values, _ in group if m in values] for m in metrics},
            sum(contended for _, contended in group),
        )
        for group in groups
    ]


def compared(metric: str, baseline: dict[str, list[float]], latest: dict[str, list[float]]) -> str:
    """The metric the detector compares for ``metric``: itself, or its time in seconds where
    the nightly's rule says so (:func:`results_db.regressions.judged_in_seconds`)."""
    seconds = regressions.PER_REFERENCE.get(metric)
    if seconds is not None and regressions.judged_in_seconds(
        len(baseline[metric]), len(latest[metric]), len(latest[seconds])
    ):
        return seconds
    return metric


def night_flagged(
    baseline: dict[str, list[float]],
    latest: dict[str, list[float]],
    metrics: tuple[str, ...],
    rule: regressions.Rule,
) -> bool:
    """The detector's verdict on one night: any of ``metrics`` flagged by ``rule``."""
    judged = [compared(m, baseline, latest) for m in metrics]
    return any(
        regressions.compare(baseline[m], latest[m], regressions.MEASURES[m], rule)[2]
        for m in judged
        if len(baseline[m]) >= regressions.MIN_BASELINE_RUNS and latest[m]
    )


def smallest_p(baseline_runs: int, latest_runs: int) -> float:
    """The smallest p a one-sided Mann–Whitney U test can give for these many runs (every
    latest run worse than every baseline run, no ties): 1 / C(baseline + latest, latest)."""
    return 1 / math.comb(baseline_runs + latest_runs, latest_runs)


def joined(nights: list[dict[str, list[float]]]) -> dict[str, list[float]]:
    """The values of several nights together, per metric."""
    return {m: [v for night in nights for v in night[m]] for m in nights[0]}


@dataclass(frozen=True)
class Night:
    """One stored night: which task, how much slower (0: unmodified), its sweep and seconds."""

    task: str
    slowdown: float
    sweep: str
    wall_s: float


def stored_nights(data: Path) -> list[Night]:
    """The nights listed in ``data``/``nights.jsonl`` that ran to the end, in run order."""
    manifest = data / MANIFEST
    if not manifest.exists():
        return []
    nights = []
    for line in manifest.read_text().splitlines():
        entry = json.loads(line)
        if entry.get("rc", 0) == 0:
            nights.append(
                Night(entry["task"], float(entry["slowdown"]), entry["sweep"], entry["wall_s"])
            )
    return nights


def run_nights(
    cases: list[Case], args: argparse.Namespace, slowdowns: list[float], data: Path
) -> None:
    """Run the planned nights, appending each to ``data``/``nights.jsonl`` as it ends.

    The order is round by round: in each round every case runs one unmodified night and one
    night of each slowdown (while it still has nights of that kind to run), so the machine's
    drift over the hours spreads over every kind instead of favouring the ones run first.
    """
    database = f"sqlite:///{data}/results.db"
    wanted = {
        (c.task, s): args.nights if s == 0 else args.slowed_nights
        for c in cases
        for s in [0.0, *slowdowns]
    }
    plan = [
        (case, slowdown, night)
        for night in range(max(wanted.values()))
        for case in cases
        for slowdown in [0.0, *slowdowns]
        if night < wanted[(case.task, slowdown)]
    ]
    walls: dict[str, list[float]] = {c.task: [] for c in cases}
    for index, (case, slowdown, night) in enumerate(plan):
        results = data / "runs" / f"{case.task}-{slowdown:g}-{night}-{time.time_ns()}"
        results.mkdir(parents=True)
        repeats = args.repeats if slowdown == 0 else args.slowed_repeats
        wall = run_night(case, repeats, slowdown, results, database, args.smoke)
        walls[case.task].append(wall)
        (sweep_dir,) = results.iterdir()
        entry = {"task": case.task, "slowdown": slowdown, "night": night}
        entry |= {"sweep": sweep_dir.name, "wall_s": round(wall, 1), "rc": 0}
        with (data / MANIFEST).open("a") as manifest:
            manifest.write(json.dumps(entry) + "\n")
        to_go = sum(statistics.fmean(walls[c.task] or [wall]) for c, *_ in plan[index + 1 :])
        print(
            f"[{index + 1}/{len(plan)}] {case.task} slowed by {slowdown:.0%}, night "
            f"{night + 1}: {wall:.0f} s; about {to_go / 60:.0f} min to go",
            flush=True,
        )


def judge(cases: list[Case], args: argparse.Namespace, data: Path) -> None:
    """Judge the nights stored in ``data`` with the detector's metrics and each ``--also``."""
    database = f"sqlite:///{data}/results.db"
    window = regressions.RULE.window
    # each --also entry is a metric or several joined by "+", judged together as the nightly
    # judges its metrics (flagged when any is)
    also_sets = [tuple(entry.split("+")) for entry in args.also.split(",") if entry]
    also = tuple(m for metrics in also_sets for m in metrics)
    nights = stored_nights(data)
    engine = make_engine(database)
    with engine.connect() as conn:
        hardware = conn.execute(select(Run.hardware).where(Run.hardware.is_not(None))).first()
    engine.dispose()
    night_runs = args.night_runs or "the stored sweeps'"
    print(
        f"\nhardware: {hardware[0] if hardware else 'not recorded'}; nights of {night_runs} "
        f"runs against {window} nights; {sum(n.wall_s for n in nights) / 60:.0f} min of runs"
    )
    rule = replace(
        regressions.RULE,
        alpha=args.alpha or regressions.RULE.alpha,
        min_change=args.min_change or regressions.RULE.min_change,
    )
    print(f"rule: {rule.describe()}")
    least_p = smallest_p(window * args.night_runs, args.night_runs) if args.night_runs else 0.0
    if least_p >= rule.alpha:
        print(
            f"note: nights of {args.night_runs} run(s) against {window} such nights can never "
            f"be flagged: the smallest p the test can give is {least_p:.3g} (alpha "
            f"{rule.alpha:g}); judge nights of 2 runs or more"
        )
    print(
        f"{'task':24s} {'metrics':34s} {'night':>11s} {'nights':>6s} {'flagged':>9s} "
        f"{'':13s} {'of 1000':>7s} {'measured change':>16s} {'contended':>9s}"
    )
    for case in cases:
        mine = [n for n in nights if n.task == case.task]
        kinds = sorted({n.slowdown for n in mine})
        seconds = [regressions.PER_REFERENCE.get(m, m) for m in case.metrics]
        measured = tuple(dict.fromkeys([*case.metrics, *seconds, *also]))
        pools = {
            s: nights_of(
                [sweep_runs(database, n.sweep, case, measured) for n in mine if n.slowdown == s],
                measured,
                args.night_runs,
            )
            for s in kinds
        }
        unmodified = [values for values, _ in pools.get(0.0, [])]
        if len(unmodified) < window + 1:
            print(f"{case.task}: {len(unmodified)} unmodified nights, {window + 1} needed")
            continue
        extra = [
            metrics
            for metrics in also_sets
            if metrics != case.metrics and all(joined(unmodified)[m] for m in metrics)
        ]
        for metrics in [case.metrics, *extra]:  # a metric the task has no values of: skipped
            for slowdown in kinds:
                these = pools[slowdown]
                rates, judged = [], 0
                for trials in (args.trials, 1000):
                    rng = random.Random(args.seed)
                    flagged = 0
                    for _ in range(trials):
                        order = rng.sample(range(len(unmodified)), len(unmodified))
                        baseline = joined([unmodified[i] for i in order[:window]])
                        latest = (
                            unmodified[order[window]] if slowdown == 0 else rng.choice(these)[0]
                        )
                        flagged += night_flagged(baseline, latest, metrics, rule)
                        if trials == args.trials:  # a night of contended runs only: not judged
                            judged += any(latest[compared(m, baseline, latest)] for m in metrics)
                    rates.append(flagged)
                metric = metrics[-1]
                values = joined([v for v, _ in these])[metric]
                base = joined(unmodified)[metric]
                # nights of contended runs only leave a pool without values
                change = (
                    statistics.fmean(values) / statistics.fmean(base) - 1
                    if values and base
                    else 0.0
                )
                spread = statistics.stdev(values) / statistics.fmean(values) if values[1:] else 0.0
                label = "unmodified" if slowdown == 0 else f"slowed {slowdown:.0%}"
                print(
                    f"{case.task:24s} {'+'.join(metrics):34s} {label:>11s} {len(these):>6d} "
                    f"{rates[0]:>3d} of {args.trials:<3d} ({judged:>2d} judged) "
                    f"{rates[1] / 10:6.1f}% "
                    f"{change:+6.1%} ±{spread:5.1%} {sum(c for _, c in these):>9d}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=9, help="unmodified nights per task")
    parser.add_argument("--slowed-nights", type=int, default=3, help="nights per slowdown")
    parser.add_argument("--slowdowns", default="0.05,0.10,0.20", help="fractions of time")
    parser.add_argument("--trials", type=int, default=10, help="nights judged per case")
    parser.add_argument("--repeats", type=int, default=3, help="runs per night (nightly: 3)")
    parser.add_argument("--seed", type=int, default=0, help="of the draws, not the runs")
    parser.add_argument(
        "--alpha", type=float, help="judge by this significance level instead of the rule's"
    )
    parser.add_argument(
        "--min-change", type=float, help="judge by this least change instead of the rule's"
    )
    parser.add_argument(
        "--night-runs",
        type=int,
        help="judge nights of this many runs, each made of consecutive runs of one kind "
        "(default: each stored sweep is a night)",
    )
    parser.add_argument(
        "--tasks", help=f"comma-separated (default: {','.join(c.task for c in CASES)})"
    )
    parser.add_argument(
        "--data",
        help="keep the nights here (runs, results.db, nights.jsonl) and add to those already "
        "there; default: a temporary folder, removed at the end",
    )
    parser.add_argument(
        "--judge-only", action="store_true", help="run nothing: judge the nights in --data"
    )
    parser.add_argument(
        "--also",
        default="",
        help="more metrics to judge the same nights by, each alone (comma-separated names "
        f"from {', '.join(regressions.MEASURES)})",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="the fewest nights the detector judges (light Task 0, one run each): about half a "
        "minute, no goal",
    )
    args = parser.parse_args()
    window = regressions.RULE.window
    if args.smoke:
        if args.data or args.judge_only:
            parser.error("--smoke runs its nights in a temporary folder: no --data, --judge-only")
        # one sweep of window + 1 runs judged as that many nights of one run: the groups
        # share one command's start, ingest and report
        args.nights, args.slowed_nights, args.slowdowns = 1, 1, "0.10"
        args.repeats, args.trials, args.night_runs = window + 1, 1, 1
        args.slowed_repeats = 1
        args.tasks = args.tasks or SMOKE_TASK
    else:
        args.slowed_repeats = args.repeats
    args.tasks = args.tasks or ",".join(c.task for c in CASES)
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    cases = [c for c in CASES if c.task in args.tasks.split(",")]
    if args.smoke:  # one rank a run: the smoke checks the benchmark's path, not a collective
        cases = [replace(c, workers=1) for c in cases]
    unknown = [
        m for m in args.also.replace("+", ",").split(",") if m and m not in regressions.MEASURES
    ]
    if unknown:
        raise SystemExit(f"--also: unknown metric(s) {', '.join(unknown)}")
    if args.judge_only and not args.data:
        raise SystemExit("--judge-only needs --data: the folder of stored nights")
    if not args.judge_only and not args.data and not args.smoke and args.nights < window + 1:
        raise SystemExit(f"--nights must be at least {window + 1}: a baseline and one more")
    with contextlib.ExitStack() as stack:
        if args.data:
            data = Path(args.data).resolve()
            data.mkdir(parents=True, exist_ok=True)
        else:
            data = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="regression-power-"))
            )
        began = time.perf_counter()
        if not args.judge_only:
            run_nights(cases, args, slowdowns, data)
        judge(cases, args, data)
    if args.smoke:
        print(
            f"\nsmoke run: {args.repeats} unmodified and {args.slowed_repeats} slowed night(s) "
            f"of one run per task in {time.perf_counter() - began:.0f} s; no goal judged"
        )


if __name__ == "__main__":
    main()
