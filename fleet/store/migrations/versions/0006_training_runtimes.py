"""training runtimes: Trainer v2's runtimes an administrator registered

One row per ``ClusterTrainingRuntime/name`` or ``TrainingRuntime/namespace/name``,
holding the runtime's document as JSON; a TrainJob's pod sets are read from it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "training_runtimes",
        sa.Column("key", sa.String(length=600), nullable=False),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("author", sa.String(length=253), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_training_runtimes")),
    )


def downgrade() -> None:
    op.drop_table("training_runtimes")
