"""Ingest speed into PostgreSQL: scalebench's path against one ORM object per row.

Writes one synthetic run of ``--ranks`` rank files holding ``--rows`` step
records in all (the worker's JSON-lines format), then, in the same run of this
script and into fresh databases:

- **scalebench**: ``results_db.ingest.ingest_location`` on those files: read and
  validate every line, summarise the run, COPY the step rows; seconds from
  start to commit, repeated ``--trials`` times (the ingest is idempotent, so
  each trial replaces the run);
- **naive**: the same step rows as ``StepTiming`` ORM objects, one
  ``session.add`` per row and one commit, on the first ``--naive-rows`` rows
  (it is too slow to wait for a million).

Prints rows/s of both, their ratio, and the seconds for the whole ingest.
Goals: ratio ≥ 10× and ``--rows`` (1,000,000) ingested in ≤ 10 s.

    .venv/bin/python benchmarks/ingest_postgres.py [--rows 1000000] [--trials 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from results_db.database import make_engine, upgrade
from results_db.ingest import ingest_location
from results_db.models import StepTiming
from scalebench.sweep import GroupPlan, new_manifest, validate_request, write_manifest

PHASES = {"data": 0.001, "forward": 0.02, "loss": 0.0005, "backward": 0.04,
          "communication": 0.01, "optimizer": 0.003}  # fmt: skip


def write_records(root: Path, rows: int, ranks: int) -> Path:
    """One sweep with one run of ``ranks`` rank files, ``rows`` step records in all."""
    request = validate_request(task="task1a-resnet20-cifar10", workers=[ranks], light=True)
    sweep_id = "bench"
    run_id = f"{sweep_id}-w{ranks}-r0"
    sweep_dir = root / sweep_id
    run_dir = sweep_dir / run_id
    run_dir.mkdir(parents=True)
    manifest = new_manifest(request, sweep_id, [GroupPlan(run_id, ranks, 0)], trigger="cli")
    manifest["groups"][0]["status"] = "succeeded"
    write_manifest(sweep_dir / "sweep.json", manifest)
    per_rank = rows // ranks
    steps_per_epoch = 390
    common = {"v": 1, "run_id": run_id, "world_size": ranks}
    for rank in range(ranks):
        with (run_dir / f"rank-{rank}.jsonl").open("w") as handle:
            start = {
                **common,
                "rank": rank,
                "kind": "event",
                "t": 0.0,
                "event": "start",
                "started_at": "2026-11-22T00:00:00+00:00",
                "device": "cpu",
            }
            handle.write(json.dumps(start) + "\n")
            for i in range(per_rank):
                record = {
                    **common,
                    "rank": rank,
                    "kind": "step",
                    "t": i * 0.075,
                    "epoch": i // steps_per_epoch,
                    "step": i % steps_per_epoch,
                    "samples": 128,
                    "loss": 2.3 - i * 1e-6,
                    "lr": 0.02,
                    "phases": PHASES,
                }
                handle.write(json.dumps(record, separators=(",", ":")) + "\n")
            done = {
                **common,
                "rank": rank,
                "kind": "event",
                "t": per_rank * 0.075,
                "event": "finished",
                "status": "max_epochs",
            }
            handle.write(json.dumps(done) + "\n")
    return sweep_dir


def fresh_database(admin_url: str) -> tuple[str, str]:
    name = f"scalebench_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    upgrade(url)
    return name, url


def drop_database(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def naive_ingest(url: str, run_id: str, rows: int) -> float:
    """Seconds to store ``rows`` step rows as ORM objects, one ``add`` each, one commit."""
    engine = make_engine(url)
    with Session(engine) as session:
        session.execute(text("DELETE FROM step_timing WHERE run_id = :r"), {"r": run_id})
        session.commit()
        started = time.perf_counter()
        for i in range(rows):
            session.add(
                StepTiming(
                    run_id=run_id,
                    rank=0,
                    epoch=i // 390,
                    step=i % 390,
                    t_s=i * 0.075,
                    samples=128,
                    loss=2.3,
                    lr=0.02,
                    data_s=0.001,
                    forward_s=0.02,
                    loss_s=0.0005,
                    backward_s=0.04,
                    communication_s=0.01,
                    optimizer_s=0.003,
                )
            )
        session.commit()
        seconds = time.perf_counter() - started
    engine.dispose()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--naive-rows", type=int, default=20_000)
    parser.add_argument(
        "--postgres", default="postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        print(f"writing {args.rows:,} step records in {args.ranks} rank files ...", flush=True)
        sweep_dir = write_records(Path(tmp), args.rows, args.ranks)
        size_mb = sum(p.stat().st_size for p in sweep_dir.rglob("*.jsonl")) / 1e6
        print(f"  {size_mb:.0f} MB of JSON lines", flush=True)
        name, url = fresh_database(args.postgres)
        try:
            engine = make_engine(url)
            ingest_location(engine, str(sweep_dir))  # warm-up: caches, first COPY
            seconds = []
            for trial in range(args.trials):
                started = time.perf_counter()
                ingest_location(engine, str(sweep_dir))
                seconds.append(time.perf_counter() - started)
                print(f"  scalebench ingest, trial {trial + 1}: {seconds[-1]:.2f} s", flush=True)
            with engine.connect() as conn:
                stored = conn.execute(select(func.count()).select_from(StepTiming)).scalar_one()
            engine.dispose()
            assert stored == args.rows, f"{stored} rows stored, {args.rows} expected"
            naive_s = naive_ingest(url, f"bench-w{args.ranks}-r0", args.naive_rows)
        finally:
            drop_database(args.postgres, name)

    ours = statistics.median(seconds)
    ours_rate = args.rows / ours
    naive_rate = args.naive_rows / naive_s
    print()
    print(
        f"scalebench: {args.rows:,} rows in {ours:.2f} s median "
        f"(min {min(seconds):.2f}, max {max(seconds):.2f}) = {ours_rate:,.0f} rows/s"
    )
    print(f"naive ORM:  {args.naive_rows:,} rows in {naive_s:.2f} s = {naive_rate:,.0f} rows/s")
    ratio = ours_rate / naive_rate
    print(
        f"ratio {ratio:.1f}× (goal ≥ 10×: {'PASS' if ratio >= 10 else 'MISS'}); "
        f"{args.rows:,} rows in {ours:.2f} s (goal ≤ 10 s: {'PASS' if ours <= 10 else 'MISS'})"
    )


if __name__ == "__main__":
    main()
