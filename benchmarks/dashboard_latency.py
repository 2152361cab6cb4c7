"""Dashboard latency: p50/p95 of each page's main callback on a large PostgreSQL database.

Creates a throwaway PostgreSQL database, migrates it and fills it with
synthetic results of the shape a busy deployment has (defaults: 1,000,000
step rows and 1,000 runs):

- one full-size manual sweep of Task 1a at 1, 2, 4, 8, 16 and 32 workers, two
  repeats each, holding ``--big-share`` (80 %) of the step rows: the sweep the
  heavy pages look at;
- a year of nightly light sweeps (1 and 2 workers, 3 repeats) sharing the
  rest of the step rows, with a few regressions flagged;
- nightly all-reduce sweeps at 2, 4 and 8 workers (80 sizes, 2 dtypes,
  100 repetitions per rank).

Step and all-reduce rows are written with binary COPY (``results_db.pg_copy``),
the same path ingest uses. Then every page's main callback is called through
Flask's test client (``POST /_dash-update-component``, exactly what the browser
sends: query, figure building, JSON encoding) ``--calls`` times, the first call
of each page counted apart as "cold" (the dashboard caches finished sweeps).
Prints per-page p50/p95 of the warm calls and the cold time, and PASS/MISS
against the goal (p95 ≤ 300 ms), and each page's first view (its layout and
first callback on an empty cache) with the Communication page's own goal
(≤ 200 ms: per-run sums of the step phases are stored at ingest, so the
largest sweep's phases are not summed from its step rows). The database is
dropped at the end.

Step rows follow the current step-record format (``workers.records``, version 3):
every phase including ``gradient_packing``, and a one-worker run packs nothing and
runs no collective (0 s of both).

``--smoke`` seeds the fewest rows and runs that still fill every page (70 runs,
2,000 step rows, one warm call per page) and judges no goal: seconds, not a measurement.

    .venv/bin/python benchmarks/dashboard_latency.py [--steps 1000000] [--runs 1000] [--calls 30]
    .venv/bin/python benchmarks/dashboard_latency.py --smoke
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from sqlalchemy import Connection, insert, text, update

from results_db import pg_copy
from results_db.analytics import COMPUTE_PHASES, percentile
from results_db.database import make_engine
from results_db.models import (
    AllReduceCurve,
    EpochEval,
    Regression,
    Run,
    RunEnvironment,
    RunEvent,
    Sweep,
)
from results_db.rows import STEP_COLUMNS
from results_db.scratch import scratch_database
from scalebench.config_hash import configuration_hash
from workers.records import PHASES, SCHEMA_VERSION

FIRST_VIEW_GOALS_S = {"communication": 0.2}  # the largest sweep's phases, first open
GOAL_S = 0.300
BIG_SIZES = (1, 2, 4, 8, 16, 32)
BIG_REPEATS = 2
NIGHT_SIZES = (1, 2)
NIGHT_REPEATS = 3
ALLREDUCE_SIZES = (2, 4, 8)
# The step rows' phase columns, in the records' phase order (``data_s`` ... ``optimizer_s``).
PHASE_COLUMNS = tuple(f"{phase}_s" for phase in PHASES)
# Mean seconds per step of the phases every rank spends alike, whatever the worker count.
LOCAL_PHASE_MEANS_S = {
    "data_s": 0.002,
    "forward_s": 0.03,
    "loss_s": 0.001,
    "backward_s": 0.06,
    "optimizer_s": 0.004,
}
# Mean seconds per step of copying the gradients into the all-reduce's buffer and back, at
# two workers or more (the gradients' size does not change with the worker count).
PACKING_MEAN_S = 0.002
# Mean seconds per step of the collective, times log2(workers + 1): it grows with the count.
COMMUNICATION_MEAN_S = 0.004
# Smoke size: the fewest runs with the big sweep, nine nights, the all-reduce sweep and one
# failed run; enough step rows for every run of the big sweep to have a few steps.
SMOKE_RUNS = 70
SMOKE_STEPS = 2000
SMOKE_CALLS = 1
START = datetime(2026, 1, 1, 2, 0, tzinfo=UTC)


@dataclass
class Seeded:
    """Ids the benchmark opens pages with."""

    big_sweep: str
    big_run: str
    latest_night: str
    baseline_night: str
    allreduce_sweep: str
    runs: int
    step_rows: int


def copy_rows(conn: Connection, table: str, columns: dict[str, Any]) -> None:
    """Binary COPY of equal-length columns into ``table``."""
    from results_db.models import Base

    names = list(columns)
    target = Base.metadata.tables[table]
    stream, _ = pg_copy.encode(
        [pg_copy.kind_of(target.c[n]) for n in names], list(columns.values())
    )
    sql = f"COPY {table} ({', '.join(names)}) FROM STDIN WITH (FORMAT binary)"
    with conn.connection.dbapi_connection.cursor() as cursor:  # type: ignore[union-attr]
        cursor.copy_expert(sql, stream, size=1 << 20)


def step_columns(
    rng: np.random.Generator, run_id: str, world_size: int, rows: int, time_to_accuracy_s: float
) -> dict[str, Any]:
    """``rows`` step rows of one run: every rank runs the same steps, spread over
    ``time_to_accuracy_s``."""
    steps_per_epoch = max(1, math.ceil(390 / world_size))
    index = np.arange(rows)
    global_step = index // world_size
    steps = int(global_step[-1]) + 1
    fraction = (global_step + 1) / steps
    columns: dict[str, Any] = {
        "run_id": [run_id] * rows,
        "rank": index % world_size,
        "epoch": global_step // steps_per_epoch,
        "step": global_step % steps_per_epoch,
        "t_s": fraction * time_to_accuracy_s,
        "samples": np.full(rows, 128),
        "loss": 2.3 * np.exp(-3 * fraction) + rng.normal(0, 0.05, rows),
        "lr": np.full(rows, 0.1),
    }
    for name, mean in LOCAL_PHASE_MEANS_S.items():
        columns[name] = rng.gamma(4.0, mean / 4.0, rows)
    if world_size > 1:
        communication_mean_s = COMMUNICATION_MEAN_S * math.log2(world_size + 1)
        columns["gradient_packing_s"] = rng.gamma(4.0, PACKING_MEAN_S / 4.0, rows)
        columns["communication_s"] = rng.gamma(4.0, communication_mean_s / 4.0, rows)
    else:  # a group of one packs nothing and runs no collective
        columns["gradient_packing_s"] = np.zeros(rows)
        columns["communication_s"] = np.zeros(rows)
    # STEP_COLUMNS order, as ingest writes them
    return {name: columns[name] for name in STEP_COLUMNS}


def add_sweep(
    conn: Connection,
    sweep_id: str,
    task: str,
    trigger: str,
    request: dict[str, Any],
    created_at: datetime,
    outcome: str,
) -> None:
    conn.execute(
        insert(Sweep).values(
            id=sweep_id,
            task=task,
            trigger=trigger,
            config=request,
            config_hash=configuration_hash(request),
            code_version="bench",
            created_at=created_at,
            finished_at=created_at + timedelta(hours=1),
            outcome=outcome,
        )
    )


def add_training_run(
    conn: Connection,
    rng: np.random.Generator,
    sweep_id: str,
    request: dict[str, Any],
    world_size: int,
    repeat: int,
    time_to_accuracy_s: float,
    rows: int,
    started_at: datetime,
) -> None:
    """A run row with its evaluations, events, environments and ``rows`` step rows."""
    run_id = f"{sweep_id}-w{world_size}-r{repeat}"
    steps = max(1, rows // world_size)
    rows = steps * world_size
    columns = step_columns(rng, run_id, world_size, rows, time_to_accuracy_s)
    copy_rows(conn, "step_timing", columns)
    # seconds per step and rank of each phase; compute is what ingest counts as such
    per_step = {name: float(np.mean(columns[name])) for name in PHASE_COLUMNS}
    step_s = sum(per_step.values())
    compute_s = steps * sum(per_step[f"{phase}_s"] for phase in COMPUTE_PHASES)
    epochs = int(columns["epoch"][-1]) + 1
    target = 70.0 if request["light"] else 80.0
    conn.execute(
        insert(Run).values(
            id=run_id,
            sweep_id=sweep_id,
            task=request["task"],
            config_hash=configuration_hash(request),
            world_size=world_size,
            repeat=repeat,
            backend=request["backend"],
            device="cuda" if not request["light"] else "cpu",
            precision="fp32",
            variant="sync",
            light=request["light"],
            status="succeeded",
            reason="",
            started_at=started_at,
            ended_at=started_at + timedelta(seconds=time_to_accuracy_s + 1),
            goal_reached=True,
            goal_metric="top1_accuracy",
            goal_target=target,
            time_to_accuracy_s=time_to_accuracy_s,
            time_to_accuracy_without_eval_s=time_to_accuracy_s * 0.95,
            eval_s=time_to_accuracy_s * 0.05,
            compute_s=compute_s,
            gradient_packing_s=steps * per_step["gradient_packing_s"],
            communication_s=steps * per_step["communication_s"],
            step_s=steps * step_s,
            communication_ratio=per_step["communication_s"] / step_s,
            epochs=epochs,
            steps=steps,
            samples_per_s=128 * world_size * steps / time_to_accuracy_s,
            quarantined_lines=0,
            ingested_at=started_at + timedelta(seconds=time_to_accuracy_s + 2),
            records_version=SCHEMA_VERSION,
            step_records=rows,
            # the per-run phase totals ingest stores beside the step rows
            **{f"{phase}_total_s": float(np.sum(columns[f"{phase}_s"])) for phase in PHASES},
        )
    )
    evals = []
    for epoch in range(epochs):
        t = time_to_accuracy_s * (epoch + 1) / epochs
        accuracy = target + 0.5 - (target - 10) * (1 - (epoch + 1) / epochs) ** 2
        evals.append(
            {
                "run_id": run_id,
                "epoch": epoch,
                "t_s": t,
                "metric_value": accuracy,
                "loss": 2.0 * (1 - (epoch + 1) / epochs) + 0.3,
                "eval_s": time_to_accuracy_s * 0.05 / epochs,
                "train_s": t * 0.95,
                "wall_s": t,
                "metrics": {"top1_accuracy": accuracy, "loss": 0.3},
            }
        )
    conn.execute(insert(EpochEval), evals)
    events = [
        {"run_id": run_id, "rank": 0, "t_s": 0.0, "event": "start", "details": {}},
        {
            "run_id": run_id,
            "rank": 0,
            "t_s": time_to_accuracy_s,
            "event": "goal_reached",
            "details": {"epoch": epochs - 1, "value": target + 0.5, "target": target},
        },
    ] + [
        {
            "run_id": run_id,
            "rank": rank,
            "t_s": time_to_accuracy_s + 1,
            "event": "finished",
            "details": {"status": "goal_reached"},
        }
        for rank in range(world_size)
    ]
    conn.execute(insert(RunEvent), events)
    conn.execute(
        insert(RunEnvironment),
        [
            {
                "run_id": run_id,
                "rank": rank,
                "host": f"node-{rank}",
                "python": "3.11.7",
                "torch": "2.13.0",
                "cuda": "12.8",
                "nccl": "2.27",
                "gpus": ["NVIDIA T4"],
                "details": {},
            }
            for rank in range(world_size)
        ],
    )


def training_request(workers: tuple[int, ...], light: bool, repeats: int) -> dict[str, Any]:
    return {
        "task": "task1a-resnet20-cifar10",
        "world_sizes": list(workers),
        "backend": "gloo" if light else "nccl",
        "light": light,
        "repeats": repeats,
        "variant": "sync",
        "precision": "fp32",
        "seed": 0,
    }


def seed(url: str, steps: int, runs: int, big_share: float, say: Callable[[str], None]) -> Seeded:
    """Fill the migrated database at ``url`` with synthetic results."""
    rng = np.random.default_rng(0)
    engine = make_engine(url)
    big_runs = len(BIG_SIZES) * BIG_REPEATS
    night_runs = len(NIGHT_SIZES) * NIGHT_REPEATS
    nights = (runs - big_runs - len(ALLREDUCE_SIZES)) // night_runs
    if nights < 9:
        raise SystemExit(f"--runs {runs} is too few: at least {big_runs + 3 + 9 * night_runs}")
    big_rows = int(steps * big_share) // big_runs
    night_rows = (steps - big_rows * big_runs) // (nights * night_runs)

    big = "task1a-resnet20-cifar10-20261120T100000Z-big0"
    request = training_request(BIG_SIZES, light=False, repeats=BIG_REPEATS)
    created = START + timedelta(days=nights + 1)
    with engine.begin() as conn:
        add_sweep(conn, big, request["task"], "manual", request, created, "succeeded")
        for index, size in enumerate(BIG_SIZES):
            for repeat in range(BIG_REPEATS):
                say(f"big sweep: {size} worker(s), repeat {repeat + 1} ({big_rows:,} step rows)")
                tta = 7200.0 / (size * 0.93**index) * rng.normal(1.0, 0.02)
                add_training_run(conn, rng, big, request, size, repeat, tta, big_rows, created)

    night_request = training_request(NIGHT_SIZES, light=True, repeats=NIGHT_REPEATS)
    flagged_nights = {nights // 2, nights - 1}
    night_ids = []
    for night in range(nights):
        sweep_id = f"task1a-resnet20-cifar10-night{night:04d}"
        night_ids.append(sweep_id)
        created = START + timedelta(days=night)
        slower = 1.12 if night in flagged_nights else 1.0
        with engine.begin() as conn:
            add_sweep(
                conn,
                sweep_id,
                night_request["task"],
                "scheduled",
                night_request,
                created,
                "succeeded",
            )
            for size in NIGHT_SIZES:
                for repeat in range(NIGHT_REPEATS):
                    tta = (2.0 if size == 1 else 1.4) * rng.normal(1.0, 0.02)
                    tta *= slower if size == 2 else 1.0
                    add_training_run(
                        conn, rng, sweep_id, night_request, size, repeat, tta, night_rows, created
                    )
            if night in flagged_nights:
                conn.execute(
                    insert(Regression).values(
                        sweep_id=sweep_id,
                        task=night_request["task"],
                        config_hash=configuration_hash(night_request),
                        world_size=2,
                        metric="time_to_accuracy_s",
                        baseline_mean=1.4,
                        latest_mean=1.4 * slower,
                        change=slower - 1,
                        p_value=0.0004,
                        reason="",
                        flagged_at=created,
                    )
                )
        if night % 20 == 0:
            say(f"nightly sweeps: {night + 1}/{nights}")

    leftover = runs - big_runs - len(ALLREDUCE_SIZES) - nights * night_runs
    if leftover:
        failed = "task1a-resnet20-cifar10-20261119T100000Z-fail"
        with engine.begin() as conn:
            add_sweep(
                conn,
                failed,
                night_request["task"],
                "manual",
                night_request,
                START + timedelta(days=nights),
                "failed",
            )
            for repeat in range(leftover):
                add_training_run(
                    conn,
                    rng,
                    failed,
                    night_request,
                    1,
                    repeat,
                    2.0,
                    night_rows,
                    START + timedelta(days=nights),
                )
                conn.execute(
                    update(Run)
                    .where(Run.id == f"{failed}-w1-r{repeat}")
                    .values(
                        status="failed",
                        reason="RuntimeError: peer went away",
                        goal_reached=False,
                        time_to_accuracy_s=None,
                    )
                )

    allreduce = "task0-allreduce-20261121T020000Z-bench"
    request = {
        "task": "task0-allreduce",
        "world_sizes": list(ALLREDUCE_SIZES),
        "backend": "nccl",
        "light": False,
        "repeats": 1,
        "variant": "sync",
        "precision": "fp32",
    }
    elements = np.unique(np.round(np.logspace(0, 8, num=80)).astype(np.int64))
    with engine.begin() as conn:
        add_sweep(
            conn,
            allreduce,
            "task0-allreduce",
            "manual",
            request,
            START + timedelta(days=nights + 2),
            "succeeded",
        )
        for size in ALLREDUCE_SIZES:
            say(f"all-reduce: {size} workers")
            run_id = f"{allreduce}-w{size}-r0"
            conn.execute(
                insert(Run).values(
                    id=run_id,
                    sweep_id=allreduce,
                    task="task0-allreduce",
                    config_hash=configuration_hash(request),
                    world_size=size,
                    repeat=0,
                    backend="nccl",
                    device="cuda",
                    precision="fp32",
                    variant="sync",
                    light=False,
                    status="succeeded",
                    reason="",
                    started_at=START,
                    ended_at=START,
                    goal_reached=False,
                    epochs=0,
                    steps=0,
                    quarantined_lines=0,
                    ingested_at=START,
                    records_version=SCHEMA_VERSION,
                )
            )
            for dtype, itemsize in (("float32", 4), ("float16", 2)):
                grid = np.array(
                    [(rank, n, rep) for rank in range(size) for n in elements for rep in range(100)]
                )
                nbytes = grid[:, 1] * itemsize
                seconds = (2e-5 + nbytes / 10e9) * rng.gamma(8.0, 1 / 8.0, len(grid))
                count = len(grid)
                copy_rows(
                    conn,
                    "allreduce_sample",
                    {
                        "run_id": [run_id] * count,
                        "rank": grid[:, 0],
                        "dtype": [dtype] * count,
                        "elements": grid[:, 1],
                        "repetition": grid[:, 2],
                        "world_size": np.full(count, size),
                        "backend": ["nccl"] * count,
                        "bytes": nbytes,
                        "seconds": seconds,
                    },
                )
                # what ingest stores beside the samples: per size, the slowest rank's
                # seconds of each repetition (grid order: rank, size, repetition)
                slowest = seconds.reshape(size, len(elements), 100).max(axis=0)
                conn.execute(
                    insert(AllReduceCurve),
                    [
                        {
                            "run_id": run_id,
                            "dtype": dtype,
                            "bytes": int(n) * itemsize,
                            "slowest_s": [float(v) for v in row],
                        }
                        for n, row in zip(elements, slowest, strict=True)
                    ],
                )
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        stored_runs = conn.execute(text("SELECT count(*) FROM run")).scalar_one()
        stored_steps = conn.execute(text("SELECT count(*) FROM step_timing")).scalar_one()
    engine.dispose()
    return Seeded(
        big, f"{big}-w4-r0", night_ids[-1], night_ids[-2], allreduce, stored_runs, stored_steps
    )


# -- measuring ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageCall:
    """A page: its address (for the layout) and its main callback with the inputs a user sends."""

    name: str
    path: str
    output: str
    values: dict[str, Any]


def page_calls(s: Seeded) -> list[PageCall]:
    task = "task1a-resnet20-cifar10"
    return [
        PageCall("overview", "/", "overview-content.children", {}),
        PageCall(
            "scaling",
            f"/scaling?sweep={s.big_sweep}",
            "scaling-tta.figure",
            {"scaling-sweep.value": s.big_sweep},
        ),
        PageCall(
            "communication",
            f"/communication?sweep={s.big_sweep}",
            "comm-phases.figure",
            {
                "comm-sweep.value": s.big_sweep,
                "comm-allreduce.value": [s.allreduce_sweep],
                "comm-dtype.value": "all",
            },
        ),
        PageCall(
            "cost",
            f"/cost?sweep={s.big_sweep}",
            "cost-bars.figure",
            {
                "cost-sweep.value": s.big_sweep,
                "cost-instance.value": "n1-standard-4",
                "cost-gpu.value": "nvidia-tesla-t4",
            },
        ),
        PageCall(
            "runs",
            "/runs",
            "runs-table.rowData",
            {
                "runs-q.value": "",
                "runs-status.value": "all",
                "runs-task.value": None,
                "runs-table.columnState": [{"colId": "time_to_accuracy_s", "sort": "desc"}],
                "runs-pages.active_page": 4,
            },
        ),
        PageCall(
            "runs (search)",
            "/runs?q=w32",
            "runs-table.rowData",
            {
                "runs-q.value": "w32",
                "runs-status.value": "all",
                "runs-task.value": task,
                "runs-table.columnState": [],
                "runs-pages.active_page": 1,
            },
        ),
        PageCall("run", f"/run?id={s.big_run}", "run-loss.figure", {"run-id.value": s.big_run}),
        PageCall(
            "compare",
            f"/compare?a={s.latest_night}&b={s.baseline_night}",
            "compare-table.children",
            {"compare-a.value": s.latest_night, "compare-b.value": s.baseline_night},
        ),
        PageCall(
            "trend",
            f"/trend?task={task}&nights=365",
            "trend-figure.figure",
            {
                "trend-task.value": task,
                "trend-metric.value": "time_to_accuracy_s",
                "trend-nights.value": 365,
            },
        ),
    ]


def timed(call: Callable[[], Any]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def measure(
    url: str,
    seeded: Seeded,
    calls: int,
    say: Callable[[str], None],
    profile: str | None = None,
    judge: bool = True,
) -> list[list[str]]:
    """Per page: cold time (empty cache), then p50/p95 of ``calls`` warm calls; table rows,
    times in milliseconds. ``profile``: a page whose cold call is also profiled (the top of
    cProfile's report). ``judge``: false for a smoke run, whose verdicts read "smoke"."""

    def verdict(seconds: float) -> str:
        if not judge:
            return "smoke"
        return "PASS" if seconds <= GOAL_S else "MISS"

    from dash_app.app import create_app
    from dash_app.client import Client

    app = create_app(url, stylesheets=[])
    client = Client(app)
    source = app.server.extensions["scalebench"]
    client.call("overview-content.children", {})  # connect, set the server up
    rows = []
    for page in page_calls(seeded):
        source.clear_cache()
        layout = timed(lambda page=page: client.open(*page.path.partition("?")[::2]))
        answer = client.call(page.output, page.values)
        assert answer, f"{page.name}: empty answer"
        source.clear_cache()
        cold = timed(lambda page=page: client.call(page.output, page.values))
        if page.name == profile:
            import cProfile
            import pstats

            source.clear_cache()
            profiler = cProfile.Profile()
            profiler.runcall(client.call, page.output, page.values)
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        warm = [
            timed(lambda page=page: client.call(page.output, page.values)) for _ in range(calls)
        ]
        layouts = [
            timed(lambda page=page: client.open(*page.path.partition("?")[::2]))
            for _ in range(max(3, calls // 3))
        ]
        p50, p95 = percentile(warm, 50), percentile(warm, 95)
        say(
            f"  {page.name:14s} callback p50 {p50 * 1e3:6.1f} ms, p95 {p95 * 1e3:6.1f} ms "
            f"({verdict(p95)}); cold {cold * 1e3:6.1f} ms; layout p95 "
            f"{percentile(layouts, 95) * 1e3:5.1f} ms (first {layout * 1e3:.0f} ms)"
        )
        rows.append(
            [
                page.name,
                f"{p50 * 1e3:.1f}",
                f"{p95 * 1e3:.1f}",
                verdict(p95),
                f"{cold * 1e3:.1f}",
                verdict(cold),
                f"{percentile(layouts, 95) * 1e3:.1f}",
                f"{(layout + cold) * 1e3:.1f}",
            ]
        )
    source.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="step rows in all")
    parser.add_argument("--runs", type=int, default=1000, help="runs in all")
    parser.add_argument(
        "--big-share", type=float, default=0.8, help="share of the step rows in the big sweep"
    )
    parser.add_argument("--calls", type=int, default=30, help="warm calls per page")
    parser.add_argument("--profile", metavar="PAGE", help="profile this page's cold call")
    parser.add_argument(
        "--postgres", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_RUNS} runs, {SMOKE_STEPS:,} step rows, {SMOKE_CALLS} warm call a page: "
        "the code path in seconds, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.runs, args.calls = SMOKE_STEPS, SMOKE_RUNS, SMOKE_CALLS

    started = time.perf_counter()
    with scratch_database(args.postgres, "scalebench_dash") as url:
        name = url.rsplit("/", 1)[-1]
        print(
            f"database {name}: writing {args.steps:,} step rows in {args.runs:,} runs ...",
            flush=True,
        )
        seeded = seed(
            url, args.steps, args.runs, args.big_share, lambda line: print("  " + line, flush=True)
        )
        print(
            f"  {seeded.runs:,} runs and {seeded.step_rows:,} step rows in "
            f"{time.perf_counter() - started:.0f} s",
            flush=True,
        )
        print(f"calling each page's main callback {args.calls} times ...", flush=True)
        rows = measure(
            url,
            seeded,
            args.calls,
            lambda line: print(line, flush=True),
            args.profile,
            judge=not args.smoke,
        )
    print(f"dropped {name}", flush=True)
    from tabulate import tabulate

    print()
    print(
        tabulate(
            rows,
            headers=[
                "page",
                "p50 ms",
                "p95 ms",
                "≤ 300 ms",
                "cold ms",
                "cold ≤ 300",
                "layout p95 ms",
                "first view ms",
            ],
        )
    )
    if args.smoke:
        print(
            f"\nsmoke run: {len(rows)} pages called on {seeded.runs:,} runs and "
            f"{seeded.step_rows:,} step rows in {time.perf_counter() - started:.0f} s; "
            "no goal judged"
        )
        return
    misses = sum(row[3] == "MISS" for row in rows)
    print(
        f"\n{len(rows) - misses} of {len(rows)} pages PASS (p95 of warm calls ≤ 300 ms); "
        f"cold = first call with an empty cache"
    )
    for row in rows:
        if row[0] in FIRST_VIEW_GOALS_S:
            goal_ms = FIRST_VIEW_GOALS_S[row[0]] * 1e3
            verdict = "PASS" if float(row[7]) <= goal_ms else "MISS"
            print(
                f"{row[0]}: first view (layout and first callback, empty cache) {row[7]} ms, "
                f"goal ≤ {goal_ms:.0f} ms: {verdict}"
            )


if __name__ == "__main__":
    main()
