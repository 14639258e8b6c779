"""Administration records: the audit log, node health marks, quota cuts, tree history.

Theory of operation: plain repository functions over one session, like
:mod:`fleet.store.jobs`.  The audit log is append-only and read newest first,
one page at a time, with an opaque continue token (the last id shown,
:mod:`fleet.store.paging`).  Node
health marks and quota cuts are small tables rewritten whole by the loop:
the marks an administrator set (a node marked healthy again is deleted), and
for every node of the quota tree that a change left over its limits, the
time of that change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store import paging
from fleet.store.models import AuditRow, NodeHealthRow, QueueUsageRow, QuotaCutRow, QuotaTreeRow

# Audit ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """What ``GET /api/v1/audit`` may filter on (None: any)."""

    actor: str | None = None
    kind: str | None = None


def add_audit(
    session: AsyncSession,
    *,
    time: float,
    actor: str,
    kind: str,
    operation: str,
    method: str,
    path: str,
    status: int,
    detail: str = "",
) -> AuditRow:
    row = AuditRow(
        time=time,
        actor=actor,
        kind=kind,
        operation=operation,
        method=method,
        path=path,
        status=status,
        detail=detail,
    )
    session.add(row)
    return row


async def insert_audits(session: AsyncSession, records: Sequence[Mapping[str, Any]]) -> None:
    """Append audit records (the columns of :func:`add_audit`) in one statement."""
    if records:
        await session.execute(insert(cast(Table, AuditRow.__table__)), [dict(r) for r in records])


async def audit_page(
    session: AsyncSession, where: AuditFilter, *, limit: int, after: str | None
) -> tuple[list[AuditRow], str | None]:
    """One page of audit records, newest first, and the next page's token (None: last)."""
    query = select(AuditRow)
    if where.actor is not None:
        query = query.where(AuditRow.actor == where.actor)
    if where.kind is not None:
        query = query.where(AuditRow.kind == where.kind)
    if after is not None:
        query = query.where(AuditRow.id < paging.decode("audit", after))
    found = await session.execute(query.order_by(AuditRow.id.desc()).limit(limit + 1))
    rows = list(found.scalars())
    if len(rows) > limit:
        return rows[:limit], paging.encode("audit", rows[limit - 1].id)
    return rows, None


# Quota tree history -------------------------------------------------------------------


async def tree_page(
    session: AsyncSession, *, limit: int, after: str | None
) -> tuple[list[QuotaTreeRow], str | None]:
    """One page of quota tree versions, newest first, and the next page's token."""
    query = select(QuotaTreeRow)
    if after is not None:
        query = query.where(QuotaTreeRow.version < paging.decode("tree", after))
    found = await session.execute(query.order_by(QuotaTreeRow.version.desc()).limit(limit + 1))
    rows = list(found.scalars())
    if len(rows) > limit:
        return rows[:limit], paging.encode("tree", rows[limit - 1].version)
    return rows, None


# Node health ------------------------------------------------------------------------------


async def bad_nodes(session: AsyncSession) -> list[NodeHealthRow]:
    """Every node marked bad, by cluster and node."""
    found = await session.execute(
        select(NodeHealthRow)
        .where(NodeHealthRow.healthy.is_(False))
        .order_by(NodeHealthRow.cluster, NodeHealthRow.node)
    )
    return list(found.scalars())


async def set_node_health(
    session: AsyncSession, cluster: str, node: str, healthy: bool, reason: str, time: float
) -> None:
    """Mark ``node`` of ``cluster`` bad, or forget its mark when it is healthy again."""
    row = await session.get(NodeHealthRow, (cluster, node))
    if healthy:
        if row is not None:
            await session.delete(row)
        return
    if row is None:
        session.add(
            NodeHealthRow(cluster=cluster, node=node, healthy=False, reason=reason, updated_at=time)
        )
    else:
        row.healthy = False
        row.reason = reason
        row.updated_at = time


async def forget_cluster_nodes(session: AsyncSession, cluster: str) -> None:
    await session.execute(delete(NodeHealthRow).where(NodeHealthRow.cluster == cluster))


# Quota cuts -----------------------------------------------------------------------------------


async def quota_cuts(session: AsyncSession) -> dict[str, float]:
    """Node -> when a tree change left it over its limits."""
    found = await session.execute(select(QuotaCutRow).order_by(QuotaCutRow.node))
    return {row.node: row.since for row in found.scalars()}


async def replace_quota_cuts(session: AsyncSession, cuts: Mapping[str, float]) -> None:
    """Store exactly ``cuts`` (node -> since)."""
    await session.execute(delete(QuotaCutRow))
    for node, since in sorted(cuts.items()):
        session.add(QuotaCutRow(node=node, since=since))


# Fair share's memory --------------------------------------------------------------------------


async def queue_usage(session: AsyncSession) -> tuple[dict[str, dict[str, float]], float]:
    """Each queue's stored decayed averages, and the time they are at (0.0: none stored)."""
    found = await session.execute(select(QueueUsageRow).order_by(QueueUsageRow.queue))
    rows = list(found.scalars())
    averages = {
        row.queue: {str(r): float(v) for r, v in row.averages.items() if isinstance(v, int | float)}
        for row in rows
    }
    return averages, max((row.at for row in rows), default=0.0)


async def replace_queue_usage(
    session: AsyncSession, averages: Mapping[str, Mapping[str, float]], at: float
) -> None:
    """Store exactly ``averages`` (queue -> resource -> decayed average) as of ``at``."""
    await session.execute(delete(QueueUsageRow))
    for queue, avg in sorted(averages.items()):
        session.add(QueueUsageRow(queue=queue, averages=dict(avg), at=at))
