"""The ring model's latency and bandwidth fitted to each all-reduce configuration.

Revision ID: 0010
Revises: 0009

Adds ``allreduce_fit``: per sweep, backend, device, dtype, network profile and worker count,
α (seconds per ring step), β (bytes per second of a link), the fit's residual (root mean
square relative error), its median and largest relative error, and the sizes it was fitted on
(``results_db.projection``). Ingest fills it for each all-reduce sweep it loads;
``scalebench db refit`` fills it for the sweeps stored before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "allreduce_fit",
        sa.Column("sweep_id", sa.String(length=200), nullable=False),
        sa.Column("backend", sa.String(length=20), nullable=False),
        sa.Column("device", sa.String(length=40), nullable=False),
        sa.Column("dtype", sa.String(length=20), nullable=False),
        sa.Column("network", sa.String(length=40), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("alpha_s", sa.Float(), nullable=False),
        sa.Column("beta_bytes_per_s", sa.Float(), nullable=False),
        sa.Column("residual", sa.Float(), nullable=False),
        sa.Column("median_error", sa.Float(), nullable=False),
        sa.Column("max_error", sa.Float(), nullable=False),
        sa.Column("sizes", sa.Integer(), nullable=False),
        sa.Column("min_bytes", sa.BigInteger(), nullable=False),
        sa.Column("max_bytes", sa.BigInteger(), nullable=False),
        sa.Column("fitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweep.id"],
            name=op.f("fk_allreduce_fit_sweep_id_sweep"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "sweep_id",
            "backend",
            "device",
            "dtype",
            "network",
            "world_size",
            name=op.f("pk_allreduce_fit"),
        ),
    )


def downgrade() -> None:
    op.drop_table("allreduce_fit")
