"""The image a Kubernetes run ran, as the kubelet resolved it.

Revision ID: 0017
Revises: 0016

A stack on Kubernetes is an image named by a tag, and a tag can move. Adds
``run.image_digest``: the image its worker containers ran as the pods' statuses report it
(``repo/worker@sha256:<64 hex>``; several, sorted and comma-separated, where its pods ran
different ones), empty for local runs and every run stored before.
"""

from __future__ import annotations

import sqlalchemy as sa

from results_db.migrations.columns import add_columns, drop_columns

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    add_columns(
        "run", sa.Column("image_digest", sa.String(length=300), nullable=False, server_default="")
    )


def downgrade() -> None:
    drop_columns("run", "image_digest")
