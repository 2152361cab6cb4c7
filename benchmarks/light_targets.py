"""Every training task's light variant, trained by real groups to its light target.

What it measures: for each task, worker count (``--workers``, 2 by default) and seed
(``--seeds``, 0 by default), one light group on this machine's local launcher, planned as a
sweep plans it (``scalebench run --light --workers 1,2,4 --seed 0 --repeats 5``: repeat r
runs with seed 0 + r, given to every rank as ``--seed``), then what ingest makes of its
records. It prints a line per group as it ends (with the time left, estimated), then a table
row per (task, workers, seed): whether the goal was reached, after how many epochs, the
time to accuracy (seconds, from the group's common start), the last value of the goal's
metric against its light threshold, and the group's wall-clock seconds; then, per task, in
how many runs the goal was reached, the epochs (least, median, most) against the light
epoch limit, and for each run that missed it, its metric at every epoch.

The claim it checks is the one each light variant is built on: a laptop reaches the light
target (85 % top-1 for Task 1a, 85 % for 2a, perplexity 6 for 3a, BLEU 20 for 4a and 4b)
within the light epoch limit, whatever the seed and worker count. The exit status is 1 when
a run misses it. The test suite runs the same groups for one epoch and checks what they
record; reaching the target is measured here, on demand. Only the epochs and whether the
goal is reached answer that claim; the seconds depend on what else the machine runs.

``--smoke`` trains light Task 2a (the cheapest) for one epoch on one worker, seed 0: the
code path, no goal judged.

    .venv/bin/python benchmarks/light_targets.py [--task all] [--workers 2] [--seeds 0]
    .venv/bin/python benchmarks/light_targets.py --task task2a-logreg-epsilon \\
        --workers 1,2,4 --seeds 0-4
    .venv/bin/python benchmarks/light_targets.py --smoke
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from operators.local_launcher import LocalGroup  # noqa: E402
from results_db.run_summary import summarise  # noqa: E402
from scalebench.host import cpu_model  # noqa: E402
from scalebench.request import MAX_REPEATS  # noqa: E402
from scalebench.sweep import GroupPlan, new_sweep_id, plan_groups, validate_request  # noqa: E402
from scalebench.tasks import TASKS as REGISTRY  # noqa: E402
from scalebench.tasks import TrainingSpec, get_task  # noqa: E402
from workers.records import read_run  # noqa: E402

# Every training task of the registry, in its order (Task 0 measures no target).
TASKS = tuple(task_id for task_id, spec in REGISTRY.items() if isinstance(spec, TrainingSpec))
# The smoke: one rank, one epoch, seed 0 (the code path; the 2-rank group's own path is the
# tests')
SMOKE_TASK, SMOKE_EPOCHS, SMOKE_WORKERS, SMOKE_SEED = "task2a-logreg-epsilon", 1, 1, 0


@dataclass(frozen=True)
class Outcome:
    """One light run of one task: how it ended and what it reached."""

    task_id: str
    workers: int
    seed: int
    status: str
    goal_reached: bool
    epochs: int
    time_to_accuracy_s: float | None
    metric: str
    last_value: float | None
    threshold: float
    wall_s: float
    reason: str
    curve: tuple[tuple[int, float], ...]  # (epoch, the goal's metric) of every evaluation

    @property
    def ok(self) -> bool:
        return self.status == "succeeded" and self.goal_reached


def parse_counts(text: str, what: str, least: int) -> list[int]:
    """``1,2,4`` or ``0-4`` (both ends included), or both mixed (``0-2,7``): the numbers in
    the order given, each once; every one at least ``least``."""
    numbers: list[int] = []
    try:
        for part in text.split(","):
            first, dash, last = part.strip().partition("-")
            low = int(first)
            high = int(last) if dash else low
            if high < low:
                raise ValueError(f"{part.strip()!r} runs backwards")
            numbers += [n for n in range(low, high + 1) if n not in numbers]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{what}: {text!r} is not like 1,2,4 or 0-4 ({exc})"
        ) from None
    if not numbers or min(numbers) < least:
        raise argparse.ArgumentTypeError(f"{what}: each at least {least}, got {text!r}")
    return numbers


def plan(
    task_id: str,
    workers: Sequence[int],
    seeds: Sequence[int],
    max_epochs: int | None,
    sweep_dir: Path,
) -> list[GroupPlan]:
    """The light groups of ``task_id`` at each worker count and seed, as a sweep plans them:
    one request from the least seed, repeated up to the greatest (repeat r: seed + r), on
    CPU tensors, eager; the repeats of other seeds left out. Interleaved as a sweep runs
    them (every worker count of one seed, then the next seed)."""
    first = min(seeds)
    fields = {
        "light": True,
        "workers": ",".join(map(str, sorted(set(workers)))),
        "seed": first,
        "repeats": max(seeds) - first + 1,
        "device": "cpu",
        "compile": "off",
        "launcher": "local",
        "data_dir": str(sweep_dir),  # a light run reads no data set
    }
    if max_epochs is not None:
        fields["max_epochs"] = max_epochs
    request = validate_request(task=task_id, **fields)
    groups = plan_groups(request, new_sweep_id(task_id), sweep_dir)
    return [g for g in groups if g.seed in seeds and g.world_size in workers]


def train(group: GroupPlan) -> Outcome:
    """Run one planned light group to its target (or its epoch limit) and read its records."""
    spec = get_task(group.request.task)
    assert isinstance(spec, TrainingSpec)
    # One intra-op thread a rank where the ranks share the cores (as the tests run them).
    threads = max(1, (os.cpu_count() or 1) // group.world_size)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    lines: list[str] = []
    began = time.perf_counter()
    local = LocalGroup.for_plan(group, env=env, sink=lines.append)
    local.start()
    result = local.wait(group.timeout_s)
    wall_s = time.perf_counter() - began
    ranks = read_run(group.run_dir)
    summary = summarise(ranks, group.run_id, group.world_size, result.status)
    metric = spec.goal.metric
    curve = tuple(
        (int(e["epoch"]), float(e["metrics"][metric]))
        for e in (ranks[0].of_kind("eval") if ranks else [])
        if metric in e.get("metrics", {})
    )
    reason = result.reason or ("" if result.status == "succeeded" else " | ".join(lines[-3:]))
    return Outcome(
        spec.id,
        group.world_size,
        group.seed,
        summary.status,
        summary.goal_reached,
        summary.epochs,
        summary.time_to_accuracy_s,
        metric,
        summary.last_metrics.get(metric),
        spec.goal.light_threshold,
        wall_s,
        reason,
        curve,
    )


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _listed(numbers: Sequence[int]) -> str:
    return ",".join(map(str, numbers))


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def estimate_left(done: list[Outcome], left: Sequence[GroupPlan]) -> float:
    """Seconds the groups ``left`` should take: each as the mean of the groups done of its
    task and worker count, else of its task, else of all."""

    def mean(walls: list[float]) -> float | None:
        return sum(walls) / len(walls) if walls else None

    every = mean([o.wall_s for o in done]) or 0.0
    total = 0.0
    for g in left:
        same = mean(
            [o.wall_s for o in done if (o.task_id, o.workers) == (g.request.task, g.world_size)]
        )
        task = mean([o.wall_s for o in done if o.task_id == g.request.task])
        total += same if same is not None else task if task is not None else every
    return total


def print_table(outcomes: list[Outcome]) -> None:
    print(
        f"{'task':<26} {'workers':>7} {'seed':>4} {'status':<10} {'goal':<5} {'epochs':>6} "
        f"{'TTA s':>7} {'metric':<15} {'last':>7} {'target':>7} {'wall s':>7}"
    )
    for o in outcomes:
        print(
            f"{o.task_id:<26} {o.workers:>7} {o.seed:>4} {o.status:<10} "
            f"{'yes' if o.goal_reached else 'no':<5} {o.epochs:>6} "
            f"{_seconds(o.time_to_accuracy_s):>7} {o.metric:<15} {_value(o.last_value):>7} "
            f"{o.threshold:>7g} {o.wall_s:>7.0f}"
        )


def print_summary(outcomes: list[Outcome]) -> None:
    """Per task: runs that reached the goal, epochs (least, median, most) against the light
    limit, and each miss with its metric at every epoch."""
    for task_id in dict.fromkeys(o.task_id for o in outcomes):
        runs = [o for o in outcomes if o.task_id == task_id]
        spec = get_task(task_id)
        assert isinstance(spec, TrainingSpec)
        reached = [o for o in runs if o.ok]
        epochs = [o.epochs for o in reached]
        spread = (
            f"epochs to the goal {min(epochs)} / {statistics.median(epochs):g} / "
            f"{max(epochs)} (least / median / most)"
            if epochs
            else "no run reached the goal"
        )
        print(
            f"{task_id}: reached in {len(reached)} of {len(runs)} runs; {spread}; light limit "
            f"{spec.light_max_epochs} epochs, target {spec.goal.describe(light=True)}"
        )
        for o in runs:
            if o.ok:
                continue
            print(
                f"  missed at {o.workers} workers, seed {o.seed}: {o.status} after "
                f"{o.epochs} epochs, last {o.metric} {_value(o.last_value)}, best "
                f"{_value(best(o))}" + (f"; {o.reason}" if o.reason else "")
            )
            if o.curve:  # epochs counted from 1
                print("    per epoch: " + " ".join(f"{e + 1}:{v:.2f}" for e, v in o.curve))


def best(o: Outcome) -> float | None:
    """The best value of the goal's metric over the run's evaluations."""
    values = [v for _, v in o.curve]
    if not values:
        return None
    spec = get_task(o.task_id)
    assert isinstance(spec, TrainingSpec)
    return min(values) if spec.goal.direction == "min" else max(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--task", default="all", help=f"a task id, several by commas, or all ({', '.join(TASKS)})"
    )
    parser.add_argument(
        "--workers",
        default=[2],
        type=lambda text: parse_counts(text, "--workers", 1),
        help="ranks in each group: one count or several, e.g. 1,2,4 (2)",
    )
    parser.add_argument(
        "--seeds",
        default=[0],
        type=lambda text: parse_counts(text, "--seeds", 0),
        help="the groups' seeds, as a sweep's repeats take them: e.g. 0-4 or 0,1,2,3,4 (0)",
    )
    parser.add_argument(
        "--max-epochs",
        type=int,
        default=None,
        help="each run's epoch limit instead of the task's light one (to see how long past "
        "the limit a run takes to its goal)",
    )
    parser.add_argument(
        "--runs",
        type=Path,
        default=None,
        help="a folder to keep the groups' records in (default: a temporary one, removed)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_TASK} for {SMOKE_EPOCHS} epoch at {SMOKE_WORKERS} worker, seed "
        f"{SMOKE_SEED}: the code path, no goal judged",
    )
    args = parser.parse_args(argv)
    tasks = list(TASKS) if args.task == "all" else [t.strip() for t in args.task.split(",")]
    if any(task not in TASKS for task in tasks):
        parser.error(f"--task: {args.task!r} is not all, or among {', '.join(TASKS)}")
    if max(args.seeds) - min(args.seeds) + 1 > MAX_REPEATS:
        parser.error(
            f"--seeds: a sweep repeats at most {MAX_REPEATS} times, so seeds that span "
            f"at most {MAX_REPEATS}, got {min(args.seeds)} to {max(args.seeds)}"
        )
    if args.max_epochs is not None and args.max_epochs < 1:
        parser.error(f"--max-epochs: at least 1, got {args.max_epochs}")
    max_epochs = args.max_epochs
    if args.smoke:
        tasks, max_epochs = [SMOKE_TASK], SMOKE_EPOCHS
        args.workers, args.seeds = [SMOKE_WORKERS], [SMOKE_SEED]
    began = time.perf_counter()
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="light-targets-") as tmp:
        runs = args.runs or Path(tmp)
        groups = [
            g
            for task_id in tasks
            for g in plan(task_id, args.workers, args.seeds, max_epochs, runs / task_id)
        ]
        print(
            f"{len(groups)} light groups: {', '.join(tasks)} at {_listed(args.workers)} "
            f"workers, seeds {_listed(args.seeds)}; {cpu_model()}, {os.cpu_count()} CPUs",
            flush=True,
        )
        for index, group in enumerate(groups):
            print(
                f"[{index + 1}/{len(groups)}] {group.request.task}, {group.world_size} "
                f"workers, seed {group.seed} ...",
                flush=True,
            )
            outcome = train(group)
            outcomes.append(outcome)
            elapsed = time.perf_counter() - began
            left = groups[index + 1 :]
            print(
                f"      {outcome.status}, goal {'reached' if outcome.goal_reached else 'missed'}"
                f", {outcome.epochs} epochs, {outcome.metric} {_value(outcome.last_value)}, "
                f"{outcome.wall_s:.0f} s; {elapsed:.0f} s so far"
                + (f", about {estimate_left(outcomes, left):.0f} s to go" if left else ""),
                flush=True,
            )
    print()
    print_table(outcomes)
    missed = [o for o in outcomes if not o.ok]
    print(f"machine: {cpu_model()}, {os.cpu_count()} CPUs; ran {time.perf_counter() - began:.0f} s")
    if args.smoke:
        print(f"smoke run: one epoch on {SMOKE_WORKERS} worker, no goal judged")
        return 0 if all(o.status == "succeeded" for o in outcomes) else 1
    print()
    print_summary(outcomes)
    print(
        "PASS"
        if not missed
        else "MISS: "
        + ", ".join(f"{o.task_id} at {o.workers} workers, seed {o.seed}" for o in missed)
    )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
