"""The machine's reference workload's time, per run.

Revision ID: 0011
Revises: 0010

Ranks now time a fixed numpy workload at their start and end
(``workers.machine_reference``). Adds ``run.machine_reference_s``: the median
over the ranks, seconds per sample; ``NULL`` for runs stored before, which did
not time it. The nightly judges step time and time to accuracy relative to it.
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("run", sa.Column("machine_reference_s", sa.Float(), nullable=True))


def downgrade() -> None:
    drop_columns("run", "machine_reference_s")
