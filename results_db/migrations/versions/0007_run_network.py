"""The network profile a run's ranks talked over.

Revision ID: 0007
Revises: 0006

Adds ``run.network``: ``host`` (the machines' own network, unshaped, as every run
stored before ran on) or an emulated link such as ``100mbit`` or ``1gbit+2ms``
(``scalebench.network``).
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run", sa.Column("network", sa.String(length=40), nullable=False, server_default="host")
    )


def downgrade() -> None:
    drop_columns("run", "network")
