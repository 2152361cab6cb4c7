"""The stack a run's ranks ran.

Revision ID: 0015
Revises: 0014

A sweep may name stacks, the ways its ranks are started (an interpreter or an image, with
environment variables: ``scalebench.stacks``), and runs every group once per stack, in
paired rounds. Adds ``run.stack``: the stack's name, empty for runs of a sweep that named
none (every run stored before).
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns("run", sa.Column("stack", sa.String(length=40), nullable=False, server_default=""))


def downgrade() -> None:
    drop_columns("run", "stack")
