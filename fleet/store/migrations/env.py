"""Alembic environment: one migration tree for SQLite and PostgreSQL.

Theory of operation: Fleet runs the migrations itself at start-up
(:func:`fleet.store.database.upgrade`) on a connection it hands over in
``config.attributes["connection"]``.  Batch mode is on so that SQLite, which
cannot alter most constraints, gets the same changes by table copy; the
metadata's naming convention gives every constraint the same name on both.
"""

from __future__ import annotations

from alembic import context

from fleet.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:
    raise RuntimeError(
        "run Fleet's migrations through fleet.store.database.upgrade (fleet serve does at start)"
    )
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
