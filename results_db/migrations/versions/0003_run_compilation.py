"""How each run's training step was compiled: the setting, whether it compiled, its cost.

Revision ID: 0003
Revises: 0002

Runs stored before this revision were all eager: they read as ``compile``
``off``, not compiled, 0 s of compilation, and no recompilation count.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("compile", sa.String(length=10), nullable=False, server_default="off")
        )
        batch_op.add_column(
            sa.Column("compiled", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("compile_s", sa.Float(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("recompilations", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run", schema=None) as batch_op:
        batch_op.drop_column("recompilations")
        batch_op.drop_column("compile_s")
        batch_op.drop_column("compiled")
        batch_op.drop_column("compile")
