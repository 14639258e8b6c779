"""Reading and writing the quota tree (versioned), the member clusters and the training runtimes.

Theory of operation: the quota tree is kept as the YAML document it was
given in, one row per version; the highest version is the tree in force, and
older versions are the history.  Member clusters are kept as their
``MemberCluster`` documents, one row per name.  Training runtimes (Trainer
v2's ``ClusterTrainingRuntime`` and ``TrainingRuntime``, registered by an
administrator) are kept as their JSON documents, one row per key
(:func:`fleet.manifests.kinds.trainjob.runtime_key`); registering a key again
replaces its document.  On PostgreSQL, replicas that
start together store the shipped configuration once: the transaction that
looks for it first takes the migration lock (:func:`lock_first_start`).
"""

from __future__ import annotations

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store.database import MIGRATION_LOCK
from fleet.store.models import ClusterRow, QuotaTreeRow, TrainingRuntimeRow


async def lock_first_start(session: AsyncSession) -> None:
    """PostgreSQL only: hold the migration lock until this transaction ends (one replica
    at a time looks for the stored configuration and stores the shipped one)."""
    await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK})


async def current_tree(session: AsyncSession) -> QuotaTreeRow | None:
    """The tree in force (the highest version), or None before the first."""
    found = await session.execute(
        select(QuotaTreeRow).order_by(QuotaTreeRow.version.desc()).limit(1)
    )
    return found.scalar_one_or_none()


async def save_tree(
    session: AsyncSession, document: str, time: float, author: str = "", diff: str = ""
) -> int:
    """Store ``document`` as the next version (``diff``: from the previous one); its number."""
    latest = (await session.execute(select(func.max(QuotaTreeRow.version)))).scalar()
    version = (latest or 0) + 1
    session.add(
        QuotaTreeRow(version=version, document=document, created_at=time, author=author, diff=diff)
    )
    return version


async def clusters(session: AsyncSession) -> list[ClusterRow]:
    """Every member cluster, by name."""
    rows = await session.execute(select(ClusterRow).order_by(ClusterRow.name))
    return list(rows.scalars())


async def put_cluster(session: AsyncSession, name: str, document: str, time: float) -> None:
    """Create or replace member cluster ``name``."""
    row = await session.get(ClusterRow, name)
    if row is None:
        session.add(ClusterRow(name=name, document=document, created_at=time, updated_at=time))
    else:
        row.document = document
        row.updated_at = time
        row.draining = False


async def delete_cluster(session: AsyncSession, name: str) -> bool:
    """Forget member cluster ``name``; whether it was there."""
    row = await session.get(ClusterRow, name)
    if row is None:
        return False
    await session.delete(row)
    return True


async def set_draining(session: AsyncSession, name: str) -> bool:
    """Mark member cluster ``name`` as draining; whether it exists."""
    row = await session.get(ClusterRow, name)
    if row is None:
        return False
    row.draining = True
    return True


async def training_runtimes(session: AsyncSession) -> list[TrainingRuntimeRow]:
    """Every registered training runtime, by key."""
    rows = await session.execute(select(TrainingRuntimeRow).order_by(TrainingRuntimeRow.key))
    return list(rows.scalars())


async def put_training_runtime(
    session: AsyncSession, key: str, document: str, time: float, author: str = ""
) -> None:
    """Register training runtime ``key`` (its JSON ``document``), replacing an earlier one."""
    row = await session.get(TrainingRuntimeRow, key)
    if row is None:
        session.add(
            TrainingRuntimeRow(
                key=key, document=document, created_at=time, updated_at=time, author=author
            )
        )
    else:
        row.document = document
        row.updated_at = time
        row.author = author
