"""Where a run's ranks were placed, and whether ones meant to be apart shared a node.

Revision ID: 0006
Revises: 0005

Adds ``run.placement`` (``spread``: one rank per node was asked; ``pack``: ranks may
share a node, as every run stored before, all of them local or unconstrained) and
``run.shared_node`` (a ``spread`` run whose ranks' environment records name one node
twice: its communication was not measured across the network).
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run",
        sa.Column("placement", sa.String(length=10), nullable=False, server_default="pack"),
        sa.Column("shared_node", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    drop_columns("run", "shared_node", "placement")
