"""preemption records: every preemption of a job, as data

``jobs.preemptions`` lists a job's preemptions, oldest first: when, the job
that needed the room ("" when none did), the cause (``Reclaim``,
``InQueuePriority``, ``QuotaCut``, ``NodeHealth``, ...), the quota path
(the tree nodes through which the quota was at stake) and the message its
Preempted event carries.  Empty for the jobs stored before: their
preemptions are in their event log only.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("preemptions", sa.JSON(), nullable=False, server_default="[]")
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("preemptions")
