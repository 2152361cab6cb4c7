"""The peak memory of a run's ranks.

Revision ID: 0013
Revises: 0012

Ranks now record the most memory they held at once in their final event
(``workers.tracker.peak_memory_bytes``: on a GPU what torch allocated, on a CPU
the process's peak resident set). Adds ``run.peak_memory_bytes``: the largest
over the ranks, bytes (``scalebench.run_metrics``); ``NULL`` for runs stored
before, whose records did not hold it.
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("run", sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    drop_columns("run", "peak_memory_bytes")
