"""Each run's step records summed per phase, so phase means need no scan of step_timing.

Revision ID: 0004
Revises: 0003

Adds ``run.step_records`` (step records of every rank) and
``run.<phase>_total_s`` (seconds, summed over every rank's steps) for the six
phases, and fills them for the runs already stored from their step rows.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

PHASES = ("data", "forward", "loss", "backward", "communication", "optimizer")


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("step_records", sa.Integer(), nullable=False, server_default="0")
        )
        for phase in PHASES:
            batch_op.add_column(
                sa.Column(f"{phase}_total_s", sa.Float(), nullable=False, server_default="0")
            )
    run = sa.table(
        "run",
        sa.column("id"),
        sa.column("step_records"),
        *(sa.column(f"{phase}_total_s") for phase in PHASES),
    )
    step = sa.table(
        "step_timing", sa.column("run_id"), *(sa.column(f"{phase}_s") for phase in PHASES)
    )

    def total(expression: sa.ColumnElement) -> sa.ScalarSelect:
        return (
            sa.select(sa.func.coalesce(expression, 0))
            .where(step.c.run_id == run.c.id)
            .scalar_subquery()
        )

    op.execute(
        run.update().values(
            step_records=total(sa.func.count()),
            **{f"{phase}_total_s": total(sa.func.sum(step.c[f"{phase}_s"])) for phase in PHASES},
        )
    )


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        for phase in reversed(PHASES):
            batch_op.drop_column(f"{phase}_total_s")
        batch_op.drop_column("step_records")
