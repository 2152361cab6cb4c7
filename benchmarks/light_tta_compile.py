"""Light Task 1a time to accuracy with the training step compiled and not, at 1 and 2 workers.

What it measures: real light sweeps (``scalebench run task1a-resnet20-cifar10
--light``) at each worker count, alternating a sweep with ``--compile off``
and one with ``--compile <other>`` (``on`` by default; ``auto`` leaves light
runs eager, see workers/compile.py), ``--rounds`` times each, every sweep
ingested into one temporary SQLite database. Time to accuracy runs from the
group's common start, so compilation (before it) is not in it; it is shown
apart, with the wall-clock seconds of each sweep, which include it.

Units: seconds. Prints per worker count the median time to accuracy of each
setting over the rounds, their ratio (off / compiled: above 1 means compiling
made training faster), and the median compile seconds. No pass/fail goal:
this is the measurement behind ``auto``'s choice.

``--task`` measures another task's light variant the same way (default Task 1a).
``--smoke`` runs one round at 1 worker with 1 repeat of light Task 2a, the cheapest task,
comparing ``off`` with ``auto`` (which leaves light runs eager): two real light runs of one
epoch each (the request's ``--max-epochs 1``; the target is not reached in one, and the
table says so), sweeps, ingest and the table, in seconds, with no compilation (the minutes
of this benchmark).

    .venv/bin/python benchmarks/light_tta_compile.py [--workers 1,2] [--rounds 2] [--repeats 3]
    .venv/bin/python benchmarks/light_tta_compile.py --smoke
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

from results_db.database import make_engine
from results_db.models import Run

TASK = "task1a-resnet20-cifar10"
# Smoke size: one sweep of each setting, one worker count, one run each, of the cheapest task.
SMOKE_TASK = "task2a-logreg-epsilon"
SMOKE_WORKERS = "1"
SMOKE_ROUNDS = 1
SMOKE_REPEATS = 1
SMOKE_EPOCHS = 1  # each smoke training ends after this many epochs, its target not reached


def sweep(
    task: str,
    setting: str,
    workers: str,
    results: Path,
    database: str,
    repeats: int | None = None,
    max_epochs: int | None = None,
) -> float:
    """Run one light sweep of ``task`` with ``repeats`` runs per worker count (None: the
    command line's default), each training ending after ``max_epochs`` epochs (None: at
    its target or the task's limit); returns its wall-clock seconds (compilation included)."""
    began = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "run",
            task,
            "--light",
            "--workers",
            workers,
            "--compile",
            setting,
            "--results",
            str(results),
            "--database",
            database,
            *(["--repeats", str(repeats)] if repeats is not None else []),
            *(["--max-epochs", str(max_epochs)] if max_epochs is not None else []),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"sweep with --compile {setting} failed:\n{done.stdout[-3000:]}")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default=TASK, help=f"the task (default {TASK})")
    parser.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    parser.add_argument("--rounds", type=int, default=2, help="sweeps per setting")
    parser.add_argument(
        "--compiled",
        default="on",
        choices=("on", "auto"),
        help="the setting compared with off (default on)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="runs per worker count in each sweep (default: the command line's, 3)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_ROUNDS} round at {SMOKE_WORKERS} worker, {SMOKE_REPEATS} repeat of "
        f"{SMOKE_TASK}: the code path at its smallest (two light runs of "
        f"{SMOKE_EPOCHS} epoch)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.workers, args.rounds, args.repeats = SMOKE_WORKERS, SMOKE_ROUNDS, SMOKE_REPEATS
        args.task = SMOKE_TASK
        args.compiled = "auto"  # eager for light runs: the code path without the compiler's minutes
    max_epochs = SMOKE_EPOCHS if args.smoke else None
    began = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="light-tta-") as tmp:
        database = f"sqlite:///{tmp}/results.db"
        walls: dict[str, list[float]] = {"off": [], args.compiled: []}
        for round_ in range(args.rounds):
            order = ("off", args.compiled) if round_ % 2 == 0 else (args.compiled, "off")
            for setting in order:
                wall = sweep(
                    args.task,
                    setting,
                    args.workers,
                    Path(tmp) / setting,
                    database,
                    args.repeats,
                    max_epochs,
                )
                walls[setting].append(wall)
                print(
                    f"round {round_ + 1}/{args.rounds}: --compile {setting}: {wall:.0f} s "
                    "wall-clock for the sweep",
                    flush=True,
                )
        engine = make_engine(database)
        with engine.connect() as conn:
            rows = conn.execute(
                select(
                    Run.compile, Run.world_size, Run.time_to_accuracy_s, Run.compile_s, Run.compiled
                )
            ).all()
        engine.dispose()

    for k in sorted({r.world_size for r in rows}):

        def of(setting: str, field: str, k: int = k) -> list[float]:
            return [
                getattr(r, field)
                for r in rows
                if r.compile == setting and r.world_size == k and r.time_to_accuracy_s is not None
            ]

        eager, compiled = of("off", "time_to_accuracy_s"), of(args.compiled, "time_to_accuracy_s")
        if not eager or not compiled:
            print(f"{k} worker(s): a setting never reached the goal")
            continue
        ran_compiled = any(r.compiled for r in rows if r.compile == args.compiled)
        print(
            f"{k} worker(s): time to accuracy off {statistics.median(eager):.1f} s "
            f"({len(eager)} runs), {args.compiled} {statistics.median(compiled):.1f} s "
            f"({'compiled' if ran_compiled else 'eager'}, {len(compiled)} runs, median "
            f"{statistics.median(of(args.compiled, 'compile_s')):.1f} s compiling before the "
            f"start); off/{args.compiled} ratio "
            f"{statistics.median(eager) / statistics.median(compiled):.3f}"
        )
    for setting, values in walls.items():
        print(f"--compile {setting}: median sweep wall-clock {statistics.median(values):.0f} s")
    if args.smoke:
        print(f"smoke run: ran {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
