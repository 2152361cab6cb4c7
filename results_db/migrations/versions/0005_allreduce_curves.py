"""Each all-reduce run's slowest-rank seconds per repetition, so summaries need no scan.

Revision ID: 0005
Revises: 0004

Adds ``allreduce_curve``: per run, dtype and message size, the slowest rank's
seconds of each repetition (a JSON list in repetition order), and fills it for
the runs already stored from their ``allreduce_sample`` rows.
"""

from __future__ import annotations

from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    curve = op.create_table(
        "allreduce_curve",
        sa.Column("run_id", sa.String(length=250), nullable=False),
        sa.Column("dtype", sa.String(length=20), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("slowest_s", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "dtype", "bytes"),
    )
    sample = sa.table(
        "allreduce_sample", *map(sa.column, ("run_id", "dtype", "bytes", "repetition", "seconds"))
    )
    rows = op.get_bind().execute(
        sa.select(
            sample.c.run_id,
            sample.c.dtype,
            sample.c.bytes,
            sample.c.repetition,
            sa.func.max(sample.c.seconds),
        )
        .group_by(sample.c.run_id, sample.c.dtype, sample.c.bytes, sample.c.repetition)
        .order_by(sample.c.run_id, sample.c.dtype, sample.c.bytes, sample.c.repetition)
    )
    curves: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for run_id, dtype, nbytes, _repetition, seconds in rows:
        curves[(run_id, dtype, nbytes)].append(float(seconds))
    if curves:
        op.bulk_insert(
            curve,
            [
                {"run_id": run_id, "dtype": dtype, "bytes": nbytes, "slowest_s": seconds}
                for (run_id, dtype, nbytes), seconds in curves.items()
            ],
        )


def downgrade() -> None:
    op.drop_table("allreduce_curve")
