"""queue samples: the fleet over time, for the dashboard's charts

One row per leaf queue (and one for the whole fleet, its queue empty) every
sampling interval: GPUs used, jobs running and pending, the p95 admission
wait of the last hour and how many admissions it is of.  Rows older than the
retention are deleted as new ones are written.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_samples",
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("queue", sa.String(length=253), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("running", sa.Integer(), nullable=False),
        sa.Column("pending", sa.Integer(), nullable=False),
        sa.Column("wait_p95", sa.Float(), nullable=True),
        sa.Column("starts", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("at", "queue", name=op.f("pk_queue_samples")),
    )


def downgrade() -> None:
    op.drop_table("queue_samples")
