"""Columns that a revision adds to, or drops from, a table that already exists.

Each call is one batch: on SQLite, where a column cannot be altered in place, the table is
copied once for all of the columns named, not once per column.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


def add_columns(table: str, *columns: sa.Column) -> None:
    """Add ``columns`` to ``table``, in the order given."""
    with op.batch_alter_table(table) as batch:
        for column in columns:
            batch.add_column(column)


def drop_columns(table: str, *names: str) -> None:
    """Drop the columns called ``names`` from ``table``, in the order given."""
    with op.batch_alter_table(table) as batch:
        for name in names:
            batch.drop_column(name)
