"""Every training task's light variant, trained by a real group to its light target.

What it measures: for each task, one light run of ``--workers`` ranks (2 by default) on
this machine's local launcher, as ``scalebench run --light`` starts it, then what ingest
makes of its records. It prints, per task, whether the goal was reached, after how many
epochs, the time to accuracy (seconds, from the group's common start), the last value of
the goal's metric against its light threshold, and the group's wall-clock seconds.

The claim it checks is the one each light variant is built on: a laptop reaches the light
target (85 % top-1 for Task 1a, 89 % for 2a, perplexity 6 for 3a, BLEU 20 for 4a and 4b)
within the light epoch limit. The exit status is 1 when a task misses it. The test suite
runs the same groups for one epoch and checks what they record; reaching the target is
measured here, on demand.

``--smoke`` trains light Task 2a (the cheapest) for one epoch on one worker: the code path, no
goal judged.

    .venv/bin/python benchmarks/light_targets.py [--task all] [--workers 2]
    .venv/bin/python benchmarks/light_targets.py --smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.local_launcher import launch_group  # noqa: E402
from results_db.run_summary import summarise  # noqa: E402
from scalebench.tasks import TASKS as REGISTRY  # noqa: E402
from scalebench.tasks import TrainingSpec, get_task  # noqa: E402
from workers.records import read_run  # noqa: E402

# Every training task of the registry, in its order (Task 0 measures no target).
TASKS = tuple(task_id for task_id, spec in REGISTRY.items() if isinstance(spec, TrainingSpec))
# The smoke: one rank, one epoch (the code path; the 2-rank group's own path is the tests')
SMOKE_TASK, SMOKE_EPOCHS, SMOKE_WORKERS = "task2a-logreg-epsilon", 1, 1
GROUP_TIMEOUT_S = 1800.0  # the slowest light run (4a on two cores) takes a few minutes


@dataclass(frozen=True)
class Outcome:
    """One light run of one task: how it ended and what it reached."""

    task_id: str
    status: str
    goal_reached: bool
    epochs: int
    time_to_accuracy_s: float | None
    metric: str
    last_value: float | None
    threshold: float
    wall_s: float
    reason: str


def train(task_id: str, workers: int, run_dir: Path, max_epochs: int | None) -> Outcome:
    """A light group of ``task_id`` with ``workers`` ranks to its target (or ``max_epochs``)."""
    spec = get_task(task_id)
    assert isinstance(spec, TrainingSpec)
    argv = ["--task", task_id, "--light", "--results", str(run_dir), "--device", "cpu"]
    if max_epochs is not None:
        argv += ["--max-epochs", str(max_epochs)]
    # One intra-op thread a rank where the ranks share the cores (as the tests run them).
    threads = max(1, (os.cpu_count() or 1) // workers)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "SCALEBENCH_COMPILE": "off"}
    lines: list[str] = []
    began = time.perf_counter()
    result = launch_group(argv, workers, timeout_s=GROUP_TIMEOUT_S, env=env, sink=lines.append)
    wall_s = time.perf_counter() - began
    summary = summarise(read_run(run_dir), run_dir.name, workers, result.status)
    metric = spec.goal.metric
    last = summary.last_metrics.get(metric)
    reason = result.reason or ("" if result.status == "succeeded" else " | ".join(lines[-3:]))
    return Outcome(
        task_id,
        summary.status,
        summary.goal_reached,
        summary.epochs,
        summary.time_to_accuracy_s,
        metric,
        last,
        spec.goal.light_threshold,
        wall_s,
        reason,
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="all", help=f"a task id, or all ({', '.join(TASKS)})")
    parser.add_argument("--workers", type=int, default=2, help="ranks in each group (2)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_TASK} for {SMOKE_EPOCHS} epoch at {SMOKE_WORKERS} worker: the code path, "
        "no goal judged",
    )
    args = parser.parse_args(argv)
    tasks = list(TASKS) if args.task == "all" else [args.task]
    if any(task not in TASKS for task in tasks):
        parser.error(f"--task: {args.task!r} is not one of all, {', '.join(TASKS)}")
    if args.workers < 1:
        parser.error(f"--workers: at least 1, got {args.workers}")
    max_epochs = None
    if args.smoke:
        tasks, max_epochs, args.workers = [SMOKE_TASK], SMOKE_EPOCHS, SMOKE_WORKERS
    began = time.perf_counter()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="light-targets-") as tmp:
        for index, task_id in enumerate(tasks):
            print(f"[{index + 1}/{len(tasks)}] {task_id}, {args.workers} workers ...", flush=True)
            outcome = train(
                task_id, args.workers, Path(tmp) / f"{task_id}-w{args.workers}", max_epochs
            )
            outcomes.append(outcome)
            elapsed = time.perf_counter() - began
            left = len(tasks) - index - 1
            print(
                f"      {outcome.status}, {outcome.epochs} epochs, {outcome.wall_s:.0f} s; "
                f"{elapsed:.0f} s so far"
                + (f", about {elapsed / (index + 1) * left:.0f} s to go" if left else ""),
                flush=True,
            )
    print()
    print(
        f"{'task':<26} {'status':<10} {'goal':<5} {'epochs':>6} {'TTA s':>7} "
        f"{'metric':<15} {'last':>7} {'target':>7} {'wall s':>7}"
    )
    missed = []
    for o in outcomes:
        last = "-" if o.last_value is None else f"{o.last_value:.2f}"
        print(
            f"{o.task_id:<26} {o.status:<10} {'yes' if o.goal_reached else 'no':<5} "
            f"{o.epochs:>6} {_seconds(o.time_to_accuracy_s):>7} {o.metric:<15} {last:>7} "
            f"{o.threshold:>7g} {o.wall_s:>7.0f}"
        )
        if not (o.status == "succeeded" and o.goal_reached):
            missed.append(o)
    for o in missed:
        if o.reason:
            print(f"{o.task_id}: {o.reason}")
    print(f"machine: {os.cpu_count()} CPUs; ran {time.perf_counter() - began:.0f} s")
    if args.smoke:
        print(f"smoke run: one epoch on {SMOKE_WORKERS} worker, no goal judged")
        return 0 if all(o.status == "succeeded" for o in outcomes) else 1
    print("PASS" if not missed else f"MISS: {', '.join(o.task_id for o in missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
