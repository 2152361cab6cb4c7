"""Ingest speed into PostgreSQL: scalebench's path against one ORM object per row.

Writes one synthetic run of ``--ranks`` rank files holding ``--rows`` step
records in all (the worker's JSON-lines format), then, in the same run of this
script and into fresh databases:

- **scalebench**: ``results_db.ingest.ingest_location`` on those files into a
  fresh database: read and validate every line, summarise the run, COPY the
  step rows (binary COPY on a second thread while the next rank file is
  read); seconds from start to commit;
- **naive**: the same files read with ``json`` and stored as one ``StepTiming``
  ORM object per record (``session.add`` each, one commit), on the first
  ``--naive-rows`` records (it is too slow to wait for a million).

Both run ``--trials`` times, alternating, after a warm-up ingest.

Prints rows/s of both, their ratio, and the seconds for the whole ingest.
Goals: ratio ≥ 10× and ``--rows`` (1,000,000) ingested in ≤ 10 s.
``--smoke`` runs the same steps on 2,000 records in 2 rank files, one trial, and judges no
goal.

    .venv/bin/python benchmarks/ingest_postgres.py [--rows 1000000] [--trials 3]
    .venv/bin/python benchmarks/ingest_postgres.py --smoke
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from results_db import ingest
from results_db.database import make_engine
from results_db.models import StepTiming
from results_db.scratch import scratch_database
from scalebench import manifest
from scalebench.sweep import new_manifest, validate_request
from workers.records import SCHEMA_VERSION

PHASES = {
    "data": 0.001,
    "forward": 0.02,
    "loss": 0.0005,
    "backward": 0.04,
    "gradient_packing": 0.002,
    "communication": 0.01,
    "optimizer": 0.003,
}
# Smoke size: two rank files (the COPY of one overlaps the reading of the next), one trial.
SMOKE_ROWS = 2000
SMOKE_RANKS = 2
SMOKE_TRIALS = 1
SMOKE_NAIVE_ROWS = 200


def write_records(root: Path, rows: int, ranks: int) -> Path:
    """One sweep with one run of ``ranks`` rank files, ``rows`` step records in all."""
    request = validate_request(task="task1a-resnet20-cifar10", workers=[ranks], light=True)
    sweep_id = "bench"
    run_id = f"{sweep_id}-w{ranks}-r0"
    sweep_dir = root / sweep_id
    run_dir = sweep_dir / run_id
    run_dir.mkdir(parents=True)
    group = manifest.GroupEntry(run_id, ranks, 0, status="succeeded")
    manifest.create(sweep_dir, new_manifest(request, sweep_id, [group], trigger="cli"))
    per_rank = rows // ranks
    steps_per_epoch = 390
    common = {"v": SCHEMA_VERSION, "run_id": run_id, "world_size": ranks}
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


def naive_ingest(url: str, sweep_dir: Path, rows: int) -> float:
    """Seconds for a naive ingest of the first ``rows`` step records of rank 0.

    Reads the file with the standard ``json`` module and stores one
    ``StepTiming`` ORM object per record (``session.add`` each, one commit).
    """
    rank_file = next(sweep_dir.glob("*/rank-0.jsonl"))
    engine = make_engine(url)
    with Session(engine) as session:
        started = time.perf_counter()
        with rank_file.open() as lines:
            stored = 0
            for line in lines:
                record = json.loads(line)
                if record["kind"] != "step":
                    continue
                p = record["phases"]
                session.add(
                    StepTiming(
                        run_id="naive",
                        rank=record["rank"],
                        epoch=record["epoch"],
                        step=record["step"],
                        t_s=record["t"],
                        samples=record["samples"],
                        loss=record["loss"],
                        lr=record["lr"],
                        data_s=p["data"],
                        forward_s=p["forward"],
                        loss_s=p["loss"],
                        backward_s=p["backward"],
                        gradient_packing_s=p["gradient_packing"],
                        communication_s=p["communication"],
                        optimizer_s=p["optimizer"],
                    )
                )
                stored += 1
                if stored == rows:
                    break
        session.commit()
        seconds = time.perf_counter() - started
    engine.dispose()
    return seconds


def timed_ingest(admin_url: str, sweep_dir: Path, rows: int) -> float:
    """Seconds of a whole ingest (files to committed rows) into a fresh database."""
    with scratch_database(admin_url, "scalebench_bench") as url:
        engine = make_engine(url)
        started = time.perf_counter()
        ingest.ingest_location(engine, str(sweep_dir))
        seconds = time.perf_counter() - started
        with engine.connect() as conn:
            stored = conn.execute(select(func.count()).select_from(StepTiming)).scalar_one()
        engine.dispose()
        assert stored == rows, f"{stored} rows stored, {rows} expected"
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
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"{SMOKE_ROWS:,} records in {SMOKE_RANKS} rank files, {SMOKE_TRIALS} trial: "
        "the code path in seconds, no goal judged",
    )
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.ranks = SMOKE_ROWS, SMOKE_RANKS
        args.trials, args.naive_rows = SMOKE_TRIALS, SMOKE_NAIVE_ROWS
    began = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp:
        print(f"writing {args.rows:,} step records in {args.ranks} rank files ...", flush=True)
        sweep_dir = write_records(Path(tmp), args.rows, args.ranks)
        size_mb = sum(p.stat().st_size for p in sweep_dir.rglob("*.jsonl")) / 1e6
        print(f"  {size_mb:.0f} MB of JSON lines", flush=True)
        timed_ingest(args.postgres, sweep_dir, args.rows)  # warm-up: file cache, server
        whole: list[float] = []
        naive: list[float] = []
        for trial in range(args.trials):
            whole.append(timed_ingest(args.postgres, sweep_dir, args.rows))
            with scratch_database(args.postgres, "scalebench_bench") as url:
                naive.append(naive_ingest(url, sweep_dir, args.naive_rows))
            print(
                f"  trial {trial + 1}: scalebench {whole[-1]:.2f} s, "
                f"naive {naive[-1]:.2f} s for {args.naive_rows:,} rows",
                flush=True,
            )

    ours = statistics.median(whole)
    ours_rate = args.rows / ours
    naive_rate = args.naive_rows / statistics.median(naive)
    ratio = ours_rate / naive_rate
    print()
    print(
        f"scalebench, files to committed rows: {args.rows:,} rows in {ours:.2f} s median "
        f"(min {min(whole):.2f}, max {max(whole):.2f}) = {ours_rate:,.0f} rows/s"
    )
    print(f"naive, files to committed rows: {naive_rate:,.0f} rows/s")
    if args.smoke:
        print(
            f"smoke run: ratio {ratio:.1f}×, ran {time.perf_counter() - began:.0f} s; "
            "no goal judged"
        )
        return
    print(
        f"ratio {ratio:.1f}× (goal ≥ 10×: {'PASS' if ratio >= 10 else 'MISS'}); "
        f"{args.rows:,} rows in {ours:.2f} s (goal ≤ 10 s: {'PASS' if ours <= 10 else 'MISS'})"
    )


if __name__ == "__main__":
    main()
