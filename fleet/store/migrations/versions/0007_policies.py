"""policies: standing PropagationPolicies, and where a job's policy came from

One row per namespace and name, holding the policy's document as JSON; a
job that arrives without a policy of its own is governed by one of them.
``jobs.policy_source`` says whether a job's policy came with its submission
(``submission``) or was a stored one (``stored``); null for the jobs stored
before, and for jobs without a policy.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "policies",
        sa.Column("namespace", sa.String(length=253), nullable=False),
        sa.Column("name", sa.String(length=253), nullable=False),
        sa.Column("api_version", sa.String(length=253), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("author", sa.String(length=253), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name=op.f("pk_policies")),
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("policy_source", sa.String(length=16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("policy_source")
    op.drop_table("policies")
