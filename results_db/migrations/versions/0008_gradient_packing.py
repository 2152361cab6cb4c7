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
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("step_timing") as batch:
        batch.add_column(
            sa.Column("gradient_packing_s", sa.Float(), nullable=False, server_default="0")
        )
    with op.batch_alter_table("run") as batch:
        batch.add_column(
            sa.Column("gradient_packing_s", sa.Float(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("gradient_packing_total_s", sa.Float(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("records_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("records_version")
        batch.drop_column("gradient_packing_total_s")
        batch.drop_column("gradient_packing_s")
    with op.batch_alter_table("step_timing") as batch:
        batch.drop_column("gradient_packing_s")
