"""job runs: a name is free again once its job was cancelled (or ended and is replaced)

A job row whose name was submitted again keeps its records and events under its
uid, with ``superseded`` set to its own id; the name's current run has
``superseded = 0``, and only one row per name may have it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("superseded", sa.Integer(), server_default="0", nullable=False)
        )
        batch_op.drop_constraint("uq_jobs_namespace_name", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_jobs_namespace_name_superseded"), ["namespace", "name", "superseded"]
        )


def downgrade() -> None:
    # The older schema holds one row per name: earlier runs are dropped with their rows.
    old_runs = "SELECT id FROM jobs WHERE superseded <> 0"
    for table in ("job_events", "intents", "unhealthy_jobs", "job_inbox"):
        op.execute(f"DELETE FROM {table} WHERE job_id IN ({old_runs})")
    op.execute("DELETE FROM jobs WHERE superseded <> 0")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_constraint("uq_jobs_namespace_name_superseded", type_="unique")
        batch_op.create_unique_constraint(
            batch_op.f("uq_jobs_namespace_name"), ["namespace", "name"]
        )
        batch_op.drop_column("superseded")
