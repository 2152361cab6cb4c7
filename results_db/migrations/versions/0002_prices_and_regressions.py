"""Price table (seeded with the published GCP prices) and nightly regression flags.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Published with the MLBench results (GCP, n1-standard-4 with an NVIDIA T4).
SEED_SOURCE = "MLBench benchmark-task results: GCP list prices"
SEED_VALID_FROM = datetime(2020, 12, 7, tzinfo=UTC)
SEED_PRICES = [
    ("instance", "n1-standard-4", 0.2092, 0.0440),
    ("gpu", "nvidia-tesla-t4", 0.35, 0.11),
]


def upgrade() -> None:
    op.create_table(
        "price",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("regular_per_hour", sa.Numeric(precision=12, scale=4), nullable=False),
        sa.Column("preemptible_per_hour", sa.Numeric(precision=12, scale=4), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("valid_from", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_price")),
        sa.UniqueConstraint("kind", "name", "valid_from", name=op.f("uq_price_kind")),
    )
    op.create_table(
        "regression",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sweep_id", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=50), nullable=False),
        sa.Column("baseline_mean", sa.Float(), nullable=False),
        sa.Column("latest_mean", sa.Float(), nullable=True),
        sa.Column("change", sa.Float(), nullable=True),
        sa.Column("p_value", sa.Float(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("flagged_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweep.id"],
            name=op.f("fk_regression_sweep_id_sweep"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regression")),
    )
    with op.batch_alter_table("regression", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_regression_sweep_id"), ["sweep_id"], unique=False)
    price = sa.table(
        "price",
        sa.column("kind", sa.String),
        sa.column("name", sa.String),
        sa.column("regular_per_hour", sa.Numeric),
        sa.column("preemptible_per_hour", sa.Numeric),
        sa.column("source", sa.Text),
        sa.column("valid_from", sa.DateTime(timezone=True)),
    )
    op.bulk_insert(
        price,
        [
            {
                "kind": kind,
                "name": name,
                "regular_per_hour": regular,
                "preemptible_per_hour": preemptible,
                "source": SEED_SOURCE,
                "valid_from": SEED_VALID_FROM,
            }
            for kind, name, regular, preemptible in SEED_PRICES
        ],
    )


def downgrade() -> None:
    with op.batch_alter_table("regression", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_regression_sweep_id"))

    op.drop_table("regression")
    op.drop_table("price")
