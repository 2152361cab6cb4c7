"""Results schema: sweeps, runs and what the runs measured.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweep",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("trigger", sa.String(length=20), nullable=False),
        sa.Column(
            "config",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("code_version", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=20), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweep")),
    )
    with op.batch_alter_table("sweep", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_sweep_config_hash"), ["config_hash"], unique=False)
        batch_op.create_index(batch_op.f("ix_sweep_task"), ["task"], unique=False)

    op.create_table(
        "run",
        sa.Column("id", sa.String(length=250), nullable=False),
        sa.Column("sweep_id", sa.String(length=200), nullable=False),
        sa.Column("task", sa.String(length=100), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=20), nullable=False),
        sa.Column("device", sa.String(length=40), nullable=False),
        sa.Column("precision", sa.String(length=20), nullable=False),
        sa.Column("variant", sa.String(length=20), nullable=False),
        sa.Column("light", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("goal_reached", sa.Boolean(), nullable=False),
        sa.Column("goal_metric", sa.String(length=50), nullable=True),
        sa.Column("goal_target", sa.Float(), nullable=True),
        sa.Column("time_to_accuracy_s", sa.Float(), nullable=True),
        sa.Column("time_to_accuracy_without_eval_s", sa.Float(), nullable=True),
        sa.Column("eval_s", sa.Float(), nullable=False),
        sa.Column("compute_s", sa.Float(), nullable=False),
        sa.Column("communication_s", sa.Float(), nullable=False),
        sa.Column("step_s", sa.Float(), nullable=False),
        sa.Column("communication_ratio", sa.Float(), nullable=True),
        sa.Column("epochs", sa.Integer(), nullable=False),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("samples_per_s", sa.Float(), nullable=True),
        sa.Column("quarantined_lines", sa.Integer(), nullable=False),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep_id"], ["sweep.id"], name=op.f("fk_run_sweep_id_sweep"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run")),
    )
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.create_index(
            "ix_run_config_hash_world_size", ["config_hash", "world_size"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_run_status"), ["status"], unique=False)
        batch_op.create_index("ix_run_sweep_world_size", ["sweep_id", "world_size"], unique=False)
        batch_op.create_index(batch_op.f("ix_run_task"), ["task"], unique=False)

    op.create_table(
        "allreduce_sample",
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("dtype", sa.String(length=20), nullable=False),
        sa.Column("elements", sa.BigInteger(), nullable=False),
        sa.Column("repetition", sa.Integer(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(length=20), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_id", "rank", "dtype", "elements", "repetition", name=op.f("pk_allreduce_sample")
        ),
    )
    with op.batch_alter_table("allreduce_sample", schema=None) as batch_op:
        batch_op.create_index(
            "ix_allreduce_sample_config", ["backend", "dtype", "world_size"], unique=False
        )

    op.create_table(
        "epoch_eval",
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("metric_value", sa.Float(), nullable=True),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("eval_s", sa.Float(), nullable=False),
        sa.Column("train_s", sa.Float(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column(
            "metrics",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_epoch_eval_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "epoch", name=op.f("pk_epoch_eval")),
    )
    op.create_table(
        "run_environment",
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("python", sa.String(length=40), nullable=True),
        sa.Column("torch", sa.String(length=60), nullable=True),
        sa.Column("cuda", sa.String(length=40), nullable=True),
        sa.Column("nccl", sa.String(length=40), nullable=True),
        sa.Column(
            "gpus",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_run_environment_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "rank", name=op.f("pk_run_environment")),
    )
    op.create_table(
        "run_event",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("event", sa.String(length=30), nullable=False),
        sa.Column(
            "details",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["run.id"], name=op.f("fk_run_event_run_id_run"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_event")),
    )
    with op.batch_alter_table("run_event", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_event_run_id"), ["run_id"], unique=False)

    op.create_table(
        "step_timing",
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("t_s", sa.Float(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("loss", sa.Float(), nullable=True),
        sa.Column("lr", sa.Float(), nullable=True),
        sa.Column("data_s", sa.Float(), nullable=False),
        sa.Column("forward_s", sa.Float(), nullable=False),
        sa.Column("loss_s", sa.Float(), nullable=False),
        sa.Column("backward_s", sa.Float(), nullable=False),
        sa.Column("communication_s", sa.Float(), nullable=False),
        sa.Column("optimizer_s", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "rank", "epoch", "step", name=op.f("pk_step_timing")),
    )


def downgrade() -> None:
    op.drop_table("step_timing")
    with op.batch_alter_table("run_event", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_event_run_id"))

    op.drop_table("run_event")
    op.drop_table("run_environment")
    op.drop_table("epoch_eval")
    with op.batch_alter_table("allreduce_sample", schema=None) as batch_op:
        batch_op.drop_index("ix_allreduce_sample_config")

    op.drop_table("allreduce_sample")
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_task"))
        batch_op.drop_index("ix_run_sweep_world_size")
        batch_op.drop_index(batch_op.f("ix_run_status"))
        batch_op.drop_index("ix_run_config_hash_world_size")

    op.drop_table("run")
    with op.batch_alter_table("sweep", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_sweep_task"))
        batch_op.drop_index(batch_op.f("ix_sweep_config_hash"))

    op.drop_table("sweep")
