"""Gradient packing timed apart from the all-reduce.

Revision ID: 0008
Revises: 0007

Records of schema version 3 time packing, dividing and unpacking the
gradients as ``gradient_packing``, and only the collective as
``communication``. Adds ``step_timing.gradient_packing_s``,
``run.gradient_packing_total_s`` and ``run.gradient_packing_s`` (0 for the
rows stored before: their packing is inside their communication), and
``run.records_version`` (``NULL`` for them, which the dashboard and the
exports label as the old meaning).
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "step_timing",
        sa.Column("gradient_packing_s", sa.Float(), nullable=False, server_default="0"),
    )
    add_columns(
        "run",
        sa.Column("gradient_packing_s", sa.Float(), nullable=False, server_default="0"),
        sa.Column("gradient_packing_total_s", sa.Float(), nullable=False, server_default="0"),
        sa.Column("records_version", sa.Integer(), nullable=True),
    )


def downgrade() -> None:
    drop_columns("run", "records_version", "gradient_packing_total_s", "gradient_packing_s")
    drop_columns("step_timing", "gradient_packing_s")
