"""A sweep exported as CSV or Parquet files, with its official results and, for a training
sweep, its scaling table."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from results_db.analytics import time_to_accuracy_text
from results_db.queries.export import iter_export_frames
from results_db.queries.sweeps import scaling_by_network, sweep_runs
from results_db.service.engines import CommandError, os_reason, reader_for


def official_result(run: Any) -> str:
    """A run in the words of the published results."""
    where = f"{run.world_size} worker(s), {run.backend}, repeat {run.repeat + 1}"
    if run.goal_metric is None:
        return f"{run.id}: {run.status} ({where})"
    target = f"{run.goal_target:g}% Top 1 Validation Accuracy"
    if run.goal_metric != "top1_accuracy":
        target = f"{run.goal_metric} {run.goal_target:g}"
    if run.goal_reached:
        return (
            f"{target} reached in {run.time_to_accuracy_s:.1f} s, compute {run.compute_s:.1f} s, "
            f"communication {run.communication_s:.1f} s ({where})"
        )
    return f"{target} not reached: {run.status} after {run.epochs} epoch(s) ({where})"


def export(url: str | None, sweep_id: str, fmt: str, out: Path) -> list[Path]:
    """Write a sweep's runs, evaluations and steps as CSV or Parquet, plus its official results;
    a training sweep also gets ``scaling``: per network profile and worker count, the time to
    accuracy by MLPerf's rule (empty when too few repeats reached the goal), the repeats it
    rests on, its spread and the speedups, with the same words as the tables."""
    if fmt not in ("csv", "parquet"):
        raise CommandError(f"format: must be csv or parquet, got {fmt!r}")
    if out.exists() and not out.is_dir():
        raise CommandError(f"out: {out} is a file; give the folder the exports go to")
    engine = reader_for(url)
    written = []
    with engine.connect() as conn:
        runs = sweep_runs(conn, sweep_id)
        if not runs:
            raise CommandError(f"sweep: no runs of sweep {sweep_id!r} in the database")
        inside(out, f"{sweep_id}-official.txt")  # before anything is written
        out.mkdir(parents=True, exist_ok=True)
        frames = list(iter_export_frames(conn, sweep_id, [r.id for r in runs]))
        if any(r.goal_metric is not None for r in runs):
            frames.append(("scaling", scaling_frame(conn, sweep_id)))
        try:
            for name, frame in frames:
                path = inside(out, f"{sweep_id}-{name}.{fmt}")
                written.append(path)
                if fmt == "csv":
                    frame.to_csv(path, index=False)
                else:
                    frame.to_parquet(path, index=False)
            official = inside(out, f"{sweep_id}-official.txt")
            written.append(official)
            text = "\n".join(official_result(r) for r in runs) + "\n"
            official.write_text(text, encoding="utf-8")
        except OSError as exc:  # a full disk or a quota, also when a file is closed
            for path in written:  # no export is left half-written
                path.unlink(missing_ok=True)
            raise CommandError(f"out: cannot write {written[-1]}: {os_reason(exc)}") from None
    engine.dispose()
    return written


def inside(out: Path, name: str) -> Path:
    """``out / name``, refused unless it is a file directly in ``out``: a name from the
    database (a sweep id) must not climb out of the folder the exports were asked into."""
    path = out / name
    if len(Path(name).parts) != 1 or path.resolve().parent != out.resolve():
        raise CommandError(
            f"sweep: {name[:80]!r} would be written outside --out {out}; a sweep id is one "
            "file name (letters, digits, '.', '_', '-')"
        )
    return path


def scaling_frame(conn: Any, sweep_id: str) -> Any:
    """The sweep's per-configuration results as a DataFrame: ``network``, the fields of
    :class:`~results_db.analytics.ScalingRow` (seconds) and ``time_to_accuracy``, the
    tables' text ("41.20 ±1.30 (3 repeats)", "1 of 3 reached the goal")."""
    import pandas as pd  # only here: a heavy import

    return pd.DataFrame(
        [
            {
                "network": network,
                **dataclasses.asdict(row),
                "time_to_accuracy": time_to_accuracy_text(row),
            }
            for network, row in scaling_by_network(conn, sweep_id)
        ]
    )
