"""administration: audit records, tree version diffs, node health, quota cuts, draining

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("time", sa.Float(), nullable=False),
        sa.Column("actor", sa.String(length=253), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("operation", sa.String(length=64), nullable=False),
        sa.Column("method", sa.String(length=16), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit")),
    )
    with op.batch_alter_table("audit", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_audit_actor_id"), ["actor", "id"], unique=False)
        batch_op.create_index(batch_op.f("ix_audit_kind_id"), ["kind", "id"], unique=False)
    op.create_table(
        "node_health",
        sa.Column("cluster", sa.String(length=253), nullable=False),
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("healthy", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "node", name=op.f("pk_node_health")),
    )
    op.create_table(
        "quota_cuts",
        sa.Column("node", sa.String(length=253), nullable=False),
        sa.Column("since", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("node", name=op.f("pk_quota_cuts")),
    )
    with op.batch_alter_table("quota_trees", schema=None) as batch_op:
        batch_op.add_column(sa.Column("diff", sa.Text(), nullable=False, server_default=""))
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("draining", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("clusters", schema=None) as batch_op:
        batch_op.drop_column("draining")
    with op.batch_alter_table("quota_trees", schema=None) as batch_op:
        batch_op.drop_column("diff")
    op.drop_table("quota_cuts")
    op.drop_table("node_health")
    with op.batch_alter_table("audit", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_audit_kind_id"))
        batch_op.drop_index(batch_op.f("ix_audit_actor_id"))
    op.drop_table("audit")
