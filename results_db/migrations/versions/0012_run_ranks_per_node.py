"""How a run's ranks sat on nodes.

Revision ID: 0012
Revises: 0011

Adds ``run.ranks_per_node``: the request's ranks per node (``scalebench.nodes``),
so a run of ``world_size`` ranks ran on ``ceil(world_size / ranks_per_node)``
nodes; 1 for runs stored before, each of whose ranks was a node of its own.
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run", sa.Column("ranks_per_node", sa.Integer(), nullable=False, server_default="1")
    )


def downgrade() -> None:
    drop_columns("run", "ranks_per_node")
