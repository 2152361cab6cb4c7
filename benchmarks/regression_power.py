"""How sensitive the nightly regression detector is: slowed nights flagged, unmodified ones not.

What it runs (real runs, on this machine, one after another):

- light Task 1a at 1 worker and light Task 0 at 2 workers, as the nightly runs them
  (``scalebench run <task> --light``): a pool of ``--pool`` unmodified runs each, and for
  every slowdown (``--slowdowns``, default 5, 10 and 20 %) a pool of ``--slowed-pool``
  slowed runs. A slowed run is the same command with ``benchmarks/slowdown`` on the ranks'
  ``PYTHONPATH``: its ``sitecustomize`` adds busy work to each training step's data phase,
  or after each all-reduce, of that fraction of its time. The product has no such flag.
- ``--trials`` nights per case, drawn from the pools: a baseline of the detector's window
  (7 nights of ``--repeats`` runs, 3 by default as in the nightly) from the unmodified pool,
  and a latest night of ``--repeats`` runs, either unmodified ones left out of that
  baseline or slowed ones. Each night is judged by the detector's own rule
  (:func:`results_db.regressions.compare` with ``RULE``) on the detector's own metrics
  (:func:`results_db.regressions.metric_values`: time to accuracy and samples/s for Task
  1a, the largest all-reduce's time for Task 0), contended runs left out as it leaves
  them out. A night is flagged when any metric is.

Prints per task and case how many of the trials were flagged (goal: at least 9 of 10
slowed nights at 10 %, at most 1 of 10 unmodified nights), the measured slowdown of each
pool's mean against the unmodified pool (what the busy work really cost), and the runs'
spread. Units: seconds, samples/s. Needs a quiet machine: other work makes runs
contended, and the detector leaves those out.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from results_db import regressions
from results_db.database import make_engine
from results_db.models import Run

ROOT = Path(__file__).resolve().parents[1]
SLOWDOWN_PATH = Path(__file__).resolve().with_name("slowdown")


@dataclass(frozen=True)
class Case:
    """One task as the nightly runs it: its worker count and the metrics the detector reads."""

    task: str
    workers: int
    metrics: tuple[str, ...]


CASES = (
    Case("task1a-resnet20-cifar10", 1, ("time_to_accuracy_s", "samples_per_s")),
    Case("task0-allreduce", 2, ("allreduce_largest_s",)),
)


def run_pool(case: Case, runs: int, slowdown: float, results: Path, database: str) -> float:
    """``runs`` repeats of ``case`` in one sweep (slowed by ``slowdown``, 0: not); returns
    the wall-clock seconds."""
    env = dict(os.environ)
    if slowdown:
        env["PYTHONPATH"] = os.pathsep.join([str(SLOWDOWN_PATH), str(ROOT)])
        env["SCALEBENCH_BENCH_SLOWDOWN"] = str(slowdown)
    began = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "run",
            case.task,
            "--light",
            "--workers",
            str(case.workers),
            "--repeats",
            str(runs),
            "--results",
            str(results),
            "--data-dir",
            str(results.parent / "data"),
            "--database",
            database,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=7200,
    )
    if done.returncode != 0:
        raise SystemExit(f"{case.task} slowed by {slowdown:.0%} failed:\n{done.stdout[-3000:]}")
    return time.perf_counter() - began


def pool_values(database: str, sweep_id: str, case: Case) -> tuple[dict[str, list[float]], int]:
    """The detector's values of each metric for a pool's runs, and how many runs it left out
    as contended."""
    engine = make_engine(database)
    taken = regressions.Comparable("host")
    with engine.connect() as conn:
        values = {
            metric: regressions.metric_values(conn, [sweep_id], metric, taken).get(case.workers, [])
            for metric in case.metrics
        }
        contended, _ = taken.left_out(conn, [sweep_id])
    engine.dispose()
    return values, contended


def night_flagged(
    baseline: dict[str, list[float]], latest: dict[str, list[float]], case: Case
) -> bool:
    """The detector's verdict on one night: any metric flagged by its rule."""
    return any(
        regressions.compare(baseline[m], latest[m], regressions.METRICS[m], regressions.RULE)[2]
        for m in case.metrics
        if len(baseline[m]) >= 3 and latest[m]
    )


def draw(values: dict[str, list[float]], picks: list[int]) -> dict[str, list[float]]:
    """The same runs' values of every metric (the lists are in run-id order)."""
    return {m: [v[i] for i in picks if i < len(v)] for m, v in values.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", type=int, default=27, help="unmodified runs per task")
    parser.add_argument("--slowed-pool", type=int, default=6, help="runs per slowdown")
    parser.add_argument("--slowdowns", default="0.05,0.10,0.20", help="fractions of time")
    parser.add_argument("--trials", type=int, default=10, help="nights judged per case")
    parser.add_argument("--repeats", type=int, default=3, help="runs per night (nightly: 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tasks", default=",".join(c.task for c in CASES))
    args = parser.parse_args()
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    cases = [c for c in CASES if c.task in args.tasks.split(",")]
    window = regressions.RULE.window * args.repeats
    if args.pool < window + args.repeats:
        raise SystemExit(f"--pool must be at least {window + args.repeats} (7 nights and one)")
    rng = random.Random(args.seed)

    with tempfile.TemporaryDirectory(prefix="regression-power-") as tmp:
        database = f"sqlite:///{tmp}/results.db"
        plan = [(c, s) for c in cases for s in [0.0, *slowdowns]]
        walls: list[float] = []  # seconds per run, of each pool
        total_s = 0.0
        pools: dict[tuple[str, float], tuple[dict[str, list[float]], int]] = {}
        for index, (case, slowdown) in enumerate(plan):
            results = Path(tmp) / f"{case.task}-{slowdown:g}"
            runs = args.pool if slowdown == 0 else args.slowed_pool
            wall = run_pool(case, runs, slowdown, results, database)
            walls.append(wall / runs)
            total_s += wall
            left = sum(args.pool if s == 0 else args.slowed_pool for _, s in plan[index + 1 :])
            (sweep_dir,) = results.iterdir() if results.is_dir() else ()
            pools[(case.task, slowdown)] = pool_values(database, sweep_dir.name, case)
            print(
                f"[{index + 1}/{len(plan)}] {case.task} slowed by {slowdown:.0%}: {runs} runs "
                f"in {wall:.0f} s; about {left * statistics.fmean(walls) / 60:.0f} min to go",
                flush=True,
            )
        engine = make_engine(database)
        with engine.connect() as conn:
            hardware = conn.execute(select(Run.hardware).where(Run.hardware.is_not(None))).first()
        engine.dispose()

    print(
        f"\nhardware: {hardware[0] if hardware else 'not recorded'}; nights of {args.repeats} "
        f"runs against {regressions.RULE.window} nights; {total_s / 60:.0f} min of runs"
    )
    print(f"rule: {regressions.RULE.describe()}")
    print(f"{'task':26s} {'case':>16s} {'flagged':>9s} {'measured change':>16s} {'left out':>9s}")
    for case in cases:
        unmodified, left_out = pools[(case.task, 0.0)]
        size = min(len(v) for v in unmodified.values())
        for slowdown in [0.0, *slowdowns]:
            values, contended = pools[(case.task, slowdown)]
            flagged = 0
            for _ in range(args.trials):
                order = rng.sample(range(size), size)
                baseline = draw(unmodified, order[:window])
                if slowdown == 0:
                    latest = draw(unmodified, order[window : window + args.repeats])
                else:
                    count = min(len(v) for v in values.values())
                    latest = draw(values, rng.sample(range(count), min(args.repeats, count)))
                flagged += night_flagged(baseline, latest, case)
            metric = case.metrics[0]
            change = statistics.fmean(values[metric]) / statistics.fmean(unmodified[metric]) - 1
            spread = statistics.stdev(values[metric]) / statistics.fmean(values[metric])
            label = "unmodified" if slowdown == 0 else f"slowed {slowdown:.0%}"
            print(
                f"{case.task:26s} {label:>16s} {flagged:>4d} of {args.trials:<3d} "
                f"{change:>+10.1%} {metric[:4]} ±{spread:.1%} "
                f"{contended if slowdown else left_out:>5d}"
            )


if __name__ == "__main__":
    main()
