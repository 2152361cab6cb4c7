"""The flags of a sweep, stored for the dashboard: one Regression row per flagged finding."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Connection, delete, insert, select

from results_db.models import Regression, Sweep
from results_db.regressions.findings import Finding
from results_db.regressions.wording import with_network


def record(conn: Connection, sweep_id: str, findings: list[Finding]) -> int:
    """Store the flagged findings of ``sweep_id`` (replacing earlier ones); returns how many."""
    sweep = conn.execute(select(Sweep.task, Sweep.config_hash).where(Sweep.id == sweep_id)).one()
    conn.execute(delete(Regression).where(Regression.sweep_id == sweep_id))
    flagged = [f for f in findings if f.flagged]
    if flagged:
        now = datetime.now(UTC)
        conn.execute(
            insert(Regression),
            [
                {
                    "sweep_id": sweep_id,
                    "task": sweep.task,
                    "config_hash": sweep.config_hash,
                    "world_size": f.world_size,
                    "metric": f.metric,
                    "baseline_mean": f.baseline_mean,
                    "latest_mean": f.latest_mean,
                    "change": f.change,
                    "p_value": f.p_value,
                    "reason": with_network(f),
                    "flagged_at": now,
                }
                for f in flagged
            ],
        )
    return len(flagged)
