"""queue usage: each queue's decayed usage, fair share's memory across restarts

One row per leaf queue with fair share's memory on: the decayed average it
held per resource (JSON, resource -> number in the resource's base unit) and
the time the figures are at.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_usage",
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("averages", sa.JSON(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name=op.f("pk_queue_usage")),
    )


def downgrade() -> None:
    op.drop_table("queue_usage")
