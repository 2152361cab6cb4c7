"""How the arms of a paired round ran: one after the other, or at once on cores of their own.

Revision ID: 0019
Revises: 0018

A duet (both arms of a round at once, each pinned to its own cores) and an interleaved round
measure the same stacks under other conditions: a duet's arm has only its own cores, an
interleaved one the whole machine. Adds ``run.pairing``: ``duet`` or ``interleaved`` for the
runs of a sweep of stacks (scalebench.pairing), empty for the rest; every paired run stored
before was interleaved.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from results_db.migrations.columns import add_columns, drop_columns

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run", sa.Column("pairing", sa.String(length=20), nullable=False, server_default="")
    )
    op.execute("UPDATE run SET pairing = 'interleaved' WHERE stack <> ''")


def downgrade() -> None:
    drop_columns("run", "pairing")
