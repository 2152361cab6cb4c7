"""The night a scheduled sweep stands for.

Revision ID: 0014
Revises: 0013

A nightly sweep records the logical date of the Airflow run that started it (its night:
``sweep.json``'s ``night``), so that the nightly's history is in the order of the nights,
not of when they happened to run (a backfill runs past nights today). Adds ``sweep.night``
(UTC); ``NULL`` for sweeps stored before and for sweeps started by hand, which are ordered
by ``created_at``.
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("sweep", sa.Column("night", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    drop_columns("sweep", "night")
