"""The paired nightly's reference pin and its findings.

Revision ID: 0016
Revises: 0015

The nightly runs tonight's stack beside a pinned reference stack, round by round, and
finds changes over the whole history of each series. Adds ``reference_pin`` (the stack
``scalebench nightly pin`` pinned, and when) and ``nightly_finding`` (one row per change
found: its first night, size, the series and phases that moved, what changed, and its
triage state).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "reference_pin",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("stack", JSON, nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("pinned_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("unpinned_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reference_pin")),
    )
    op.create_table(
        "nightly_finding",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("first_night", sa.DateTime(timezone=True), nullable=False),
        sa.Column("first_sweep_id", sa.String(length=200), nullable=False),
        sa.Column("attribution", sa.String(length=20), nullable=False),
        sa.Column("size", sa.Float(), nullable=False),
        sa.Column("low", sa.Float(), nullable=False),
        sa.Column("high", sa.Float(), nullable=False),
        sa.Column("p_value", sa.Float(), nullable=False),
        sa.Column("series", JSON, nullable=False),
        sa.Column("phases", JSON, nullable=False),
        sa.Column("diff", JSON, nullable=False),
        sa.Column("state", sa.String(length=20), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("state_changed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_nightly_finding")),
    )
    op.create_index(
        op.f("ix_nightly_finding_first_night"), "nightly_finding", ["first_night"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_nightly_finding_first_night"), table_name="nightly_finding")
    op.drop_table("nightly_finding")
    op.drop_table("reference_pin")
