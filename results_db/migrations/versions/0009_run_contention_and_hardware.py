"""Contention and hardware of each run.

Revision ID: 0009
Revises: 0008

Ranks now record the machine's and their own CPU seconds while they run.
Adds ``run.contention_share`` (the share of the group's cores other processes
took; ``NULL`` for runs stored before, which did not measure it),
``run.contended`` (that share above the threshold set at ingest; false for
those runs) and ``run.hardware`` (the processor, and GPUs, the ranks ran on;
``NULL`` where the records do not say).
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run",
        sa.Column("contention_share", sa.Float(), nullable=True),
        sa.Column("contended", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("hardware", sa.String(250), nullable=True),
    )


def downgrade() -> None:
    drop_columns("run", "hardware", "contended", "contention_share")
