"""failover clocks: since when a running job has been unhealthy in its member

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "unhealthy_jobs",
        sa.Column("job_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_unhealthy_jobs_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_unhealthy_jobs")),
    )


def downgrade() -> None:
    op.drop_table("unhealthy_jobs")
