"""The transports a run's traffic took, within its nodes and between them.

Revision ID: 0018
Revises: 0017

A measurement between nodes describes the fabric only if NCCL used it: NCCL falls back to TCP
sockets where a pod has no RDMA device, silently. Adds ``run.transport_within_node`` and
``run.transport_between_nodes``: what the ranks' NCCL logs name (``P2P``, ``SHM``,
``NET/IB``, ``NET/Socket``), ``TCP (gloo)`` for gloo; empty for every run stored before.
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run",
        sa.Column(
            "transport_within_node", sa.String(length=100), nullable=False, server_default=""
        ),
        sa.Column(
            "transport_between_nodes", sa.String(length=100), nullable=False, server_default=""
        ),
    )


def downgrade() -> None:
    drop_columns("run", "transport_within_node", "transport_between_nodes")
