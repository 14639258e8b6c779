"""Reading and writing the quota tree (versioned), member clusters, training runtimes, policies.

Theory of operation: the quota tree is kept as the YAML document it was
given in, one row per version; the highest version is the tree in force, and
older versions are the history.  Member clusters are kept as their
``MemberCluster`` documents, one row per name.  Training runtimes (Trainer
v2's ``ClusterTrainingRuntime`` and ``TrainingRuntime``, registered by an
administrator) are kept as their JSON documents, one row per key
(:func:`fleet.manifests.kinds.trainjob.runtime_key`); registering a key again
replaces its document.  Standing PropagationPolicies are kept as their JSON
documents, one row per namespace and name (with the apiVersion beside, for
listing); storing a name again replaces its document, deleting it forgets
it; any number of them is stored by one upsert statement
(:func:`put_policies`: the intake stores a whole batch's in its
transaction).  On PostgreSQL, replicas that start together store the shipped
configuration once: the transaction that looks for it first takes the
migration lock (:func:`lock_first_start`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import delete, func, select, text
from sqlalchemy.engine import CursorResult
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store.database import MIGRATION_LOCK
from fleet.store.models import ClusterRow, PolicyRow, QuotaTreeRow, TrainingRuntimeRow


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


async def stored_policies(session: AsyncSession) -> list[PolicyRow]:
    """Every standing PropagationPolicy, by namespace and name."""
    rows = await session.execute(select(PolicyRow).order_by(PolicyRow.namespace, PolicyRow.name))
    return list(rows.scalars())


async def stored_policy(session: AsyncSession, namespace: str, name: str) -> PolicyRow | None:
    """The stored policy ``namespace/name``, or None."""
    return await session.get(PolicyRow, (namespace, name))


@dataclass(frozen=True, slots=True)
class PolicyValues:
    """A policy to store: its namespace, name, apiVersion, JSON document and who stores it."""

    namespace: str
    name: str
    api_version: str
    document: str
    author: str = ""


_PUT_POLICIES = text(
    "INSERT INTO policies "
    "(namespace, name, api_version, document, created_at, updated_at, author) "
    "VALUES (:namespace, :name, :api_version, :document, :time, :time, :author) "
    "ON CONFLICT (namespace, name) DO UPDATE SET api_version = excluded.api_version, "
    "document = excluded.document, updated_at = excluded.updated_at, author = excluded.author"
)


async def put_policies(
    session: AsyncSession, policies: Sequence[PolicyValues], time: float
) -> None:
    """Store policies, each replacing an earlier one of its namespace and name (which
    keeps its creation time), in one statement; one of a namespace and name at most."""
    if not policies:
        return
    await session.execute(
        _PUT_POLICIES,
        [
            {
                "namespace": p.namespace,
                "name": p.name,
                "api_version": p.api_version,
                "document": p.document,
                "time": time,
                "author": p.author,
            }
            for p in policies
        ],
    )


async def delete_policy(session: AsyncSession, namespace: str, name: str) -> bool:
    """Forget policy ``namespace/name``; whether it was there."""
    found = await session.execute(
        delete(PolicyRow).where(PolicyRow.namespace == namespace, PolicyRow.name == name)
    )
    return cast(CursorResult[Any], found).rowcount > 0
