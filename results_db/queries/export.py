"""A sweep's rows for export (CSV, Parquet): steps, epochs, runs and scaling."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, select

from results_db.models import (
    EpochEval,
    Run,
    StepTiming,
)
from results_db.rows import STEP_COLUMNS

if TYPE_CHECKING:
    import pandas as pd


# A step row as stored (results_db.rows), without the run id the export's file names.
STEP_EXPORT_COLUMNS = tuple(name for name in STEP_COLUMNS if name != "run_id")


EPOCH_EXPORT_COLUMNS = ("epoch", "t_s", "metric_value", "loss", "eval_s", "train_s", "wall_s")


def iter_run_steps(conn: Connection, run_id: str, batch: int = 5000) -> Iterator[tuple[Any, ...]]:
    """Every step row of a run (columns :data:`STEP_EXPORT_COLUMNS`), streamed in batches."""
    result = conn.execution_options(yield_per=batch).execute(
        select(*(getattr(StepTiming, name) for name in STEP_EXPORT_COLUMNS))
        .where(StepTiming.run_id == run_id)
        .order_by(StepTiming.rank, StepTiming.epoch, StepTiming.step)
    )
    for row in result:
        yield tuple(row)


def run_epochs(conn: Connection, run_id: str) -> list[tuple[Any, ...]]:
    """A run's evaluations (columns :data:`EPOCH_EXPORT_COLUMNS`) in epoch order."""
    rows = conn.execute(
        select(*(getattr(EpochEval, name) for name in EPOCH_EXPORT_COLUMNS))
        .where(EpochEval.run_id == run_id)
        .order_by(EpochEval.epoch)
    )
    return [tuple(row) for row in rows]


def iter_export_frames(
    conn: Connection, sweep_id: str, run_ids: list[str]
) -> Iterator[tuple[str, pd.DataFrame]]:
    """A sweep's ``runs``, then the ``evaluations`` and ``steps`` of ``run_ids`` (its runs):
    whole table rows as pandas DataFrames, the tables' column names and units (seconds).

    One table is read at a time, when the caller asks for it.
    """
    import pandas as pd

    tables = {
        "runs": select(Run).where(Run.sweep_id == sweep_id),
        "evaluations": select(EpochEval).where(EpochEval.run_id.in_(run_ids)),
        "steps": select(StepTiming).where(StepTiming.run_id.in_(run_ids)),
    }
    for name, query in tables.items():
        yield name, portable(pd.read_sql(query, conn))


def portable(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` written the same from either database: times as ISO 8601 UTC instants
    (SQLite hands back naive UTC wall times, PostgreSQL aware ones), and JSON columns
    (a run's metrics, a sweep's request) as JSON with sorted keys, not Python's repr."""
    import json

    import pandas as pd

    for column in frame.columns:
        values = frame[column]
        if pd.api.types.is_datetime64_any_dtype(values):
            utc = (
                values.dt.tz_localize("UTC")
                if values.dt.tz is None
                else values.dt.tz_convert("UTC")
            )
            frame[column] = utc.map(lambda t: t.isoformat() if pd.notna(t) else None)
        elif values.dtype == object and values.map(lambda v: isinstance(v, dict | list)).any():
            frame[column] = values.map(
                lambda v: json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v
            )
    return frame
