"""The tables: jobs, their append-only event log, quota tree versions, clusters, intents.

Theory of operation: one declarative metadata with a constraint naming
convention, so that Alembic migrations name every constraint the same way on
SQLite and PostgreSQL.  Structured values that only the shell reads whole
(the submitted manifests, the core job record, the units a running job holds)
are JSON columns; everything the API filters on (namespace, name, queue,
state, cluster) is a plain indexed column.  Times are seconds from the
service's clock (a float), never the database's clock, so the simulator's
virtual time is recorded as it is.

* ``jobs``: one row per submitted job; ``id`` is also its submission order
  (the core job's ``seq``).  ``units`` is what a running job holds, in the
  form :mod:`fleet.core.snapshot` records (charge key, mode, request, pods);
  ``preemptions`` every time it was preempted (when, by which job, the cause,
  the quota path, the message).
* ``job_events``: every lifecycle transition and notable event, append-only.
* ``quota_trees``: every version of the ElasticQuotaTree; the highest is current.
* ``clusters``: the member clusters (MemberCluster documents).
* ``training_runtimes``: Trainer v2's runtimes an administrator registered.
* ``policies``: the standing PropagationPolicies, by namespace and name; a
  job's row records the policy that governs it (``policy``) and where that
  policy came from (``policy_source``: ``submission`` or ``stored``).
* ``unhealthy_jobs``: since when a running job has been unhealthy in its member
  (the failover clock, kept across restarts).
* ``intents``: what the loop decided to do to a member cluster and has not
  yet confirmed (create, delete), and cancellations users asked for that the
  loop has not yet carried out (cancel); redone after a crash, idempotently.
* ``audit``: every write through the API (who, when, which route, outcome).
* ``node_health``: nodes marked bad (or healthy again) by an administrator.
* ``quota_cuts``: when a tree change left a node over its limits (the
  ``--quota-cut-grace`` clock survives a restart).
* ``queue_usage``: each queue's decayed usage for fair share with memory
  (:mod:`fleet.core.fair_share`), as of ``at``: kept across restarts.
* ``queue_samples``: the fleet over time, for the dashboard's charts: every
  ``history_interval`` seconds one row per leaf queue (GPUs used, jobs
  running and pending, the p95 admission wait of the last hour) and one for
  the whole fleet (``queue`` empty); rows older than ``history_retention``
  are deleted as new ones are written (:mod:`fleet.service.history`).
* ``leases``: the scheduler's leader, its term and lease (PostgreSQL only).
* ``job_inbox``: jobs stored by any replica, until the leader picks them up
  (PostgreSQL only).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # one current run per name (superseded = 0); earlier runs keep their rows
        UniqueConstraint("namespace", "name", "superseded"),
        Index(None, "queue", "state"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    uid: Mapped[str] = mapped_column(String(36), unique=True)
    namespace: Mapped[str] = mapped_column(String(253))
    name: Mapped[str] = mapped_column(String(253))
    spec_hash: Mapped[str] = mapped_column(String(64))
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    policy: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    #: where ``policy`` came from: ``submission`` (the job's own submission held it),
    #: ``stored`` (a standing policy of its namespace), or None (no policy)
    policy_source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    #: the core job (fleet.core.snapshot's plain form)
    record: Mapped[dict[str, Any]] = mapped_column(JSON)
    queue: Mapped[str] = mapped_column(String(253))
    priority_class: Mapped[str] = mapped_column(String(253))
    priority: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(32), index=True)
    mode: Mapped[str | None] = mapped_column(String(32), nullable=True)
    cluster: Mapped[str | None] = mapped_column(String(253), nullable=True, index=True)
    units: Mapped[list[Any]] = mapped_column(JSON, default=list)
    reason: Mapped[str] = mapped_column(Text, default="")
    #: every preemption of the job, oldest first (``fleet.store.jobs.preemption_record``)
    preemptions: Mapped[list[Any]] = mapped_column(JSON, default=list, server_default="[]")
    suspended: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    #: 0 while this row is its name's current run; its own id once the name was
    #: submitted again (the run stays findable by its uid)
    superseded: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class JobEventRow(Base):
    __tablename__ = "job_events"
    __table_args__ = (Index(None, "job_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    time: Mapped[float] = mapped_column(Float)
    type: Mapped[str] = mapped_column(String(16))  # Normal | Warning
    reason: Mapped[str] = mapped_column(String(64))
    message: Mapped[str] = mapped_column(Text, default="")


class QuotaTreeRow(Base):
    __tablename__ = "quota_trees"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    document: Mapped[str] = mapped_column(Text)  # the ElasticQuotaTree as YAML
    created_at: Mapped[float] = mapped_column(Float)
    author: Mapped[str] = mapped_column(String(253), default="")
    #: unified diff from the previous version's document ("" for the first)
    diff: Mapped[str] = mapped_column(Text, default="")


class ClusterRow(Base):
    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    document: Mapped[str] = mapped_column(Text)  # the MemberCluster as YAML
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    #: being drained (DELETE): nothing new is admitted; removed once its jobs ended
    draining: Mapped[bool] = mapped_column(Boolean, default=False)


class TrainingRuntimeRow(Base):
    """A registered training runtime (Trainer v2): its document by key, the latest one."""

    __tablename__ = "training_runtimes"

    #: ``ClusterTrainingRuntime/name`` or ``TrainingRuntime/namespace/name``
    key: Mapped[str] = mapped_column(String(600), primary_key=True)
    document: Mapped[str] = mapped_column(Text)  # the runtime as JSON
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    author: Mapped[str] = mapped_column(String(253), default="")


class PolicyRow(Base):
    """A standing PropagationPolicy: the latest document of its namespace and name."""

    __tablename__ = "policies"

    namespace: Mapped[str] = mapped_column(String(253), primary_key=True)
    name: Mapped[str] = mapped_column(String(253), primary_key=True)
    #: ``policy.one.alibabacloud.com/v1alpha1`` or ``policy.karmada.io/v1alpha1``
    api_version: Mapped[str] = mapped_column(String(253))
    document: Mapped[str] = mapped_column(Text)  # the policy as JSON
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    author: Mapped[str] = mapped_column(String(253), default="")


class IntentRow(Base):
    __tablename__ = "intents"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # create | delete | cancel
    cluster: Mapped[str] = mapped_column(String(253))
    created_at: Mapped[float] = mapped_column(Float)
    done_at: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)


class AuditRow(Base):
    __tablename__ = "audit"
    __table_args__ = (Index(None, "actor", "id"), Index(None, "kind", "id"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    time: Mapped[float] = mapped_column(Float)
    actor: Mapped[str] = mapped_column(String(253))  # the token's name
    kind: Mapped[str] = mapped_column(String(32))  # submission | cancel | quota-tree | ...
    operation: Mapped[str] = mapped_column(String(64))  # the route's operation id
    method: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(Text)
    status: Mapped[int] = mapped_column(Integer)
    detail: Mapped[str] = mapped_column(Text, default="")


class NodeHealthRow(Base):
    __tablename__ = "node_health"

    cluster: Mapped[str] = mapped_column(String(253), primary_key=True)
    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    healthy: Mapped[bool] = mapped_column(Boolean)
    reason: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[float] = mapped_column(Float)


class QuotaCutRow(Base):
    __tablename__ = "quota_cuts"

    node: Mapped[str] = mapped_column(String(253), primary_key=True)
    since: Mapped[float] = mapped_column(Float)


class QueueUsageRow(Base):
    """A queue's decayed average held per resource (fair share's memory), as of ``at``."""

    __tablename__ = "queue_usage"

    queue: Mapped[str] = mapped_column(String(253), primary_key=True)
    #: resource -> the decayed average held, in the resource's base unit
    averages: Mapped[dict[str, Any]] = mapped_column(JSON)
    at: Mapped[float] = mapped_column(Float)


class QueueSampleRow(Base):
    """One queue's figures at one moment (``queue`` empty: the whole fleet's)."""

    __tablename__ = "queue_samples"

    at: Mapped[float] = mapped_column(Float, primary_key=True)
    queue: Mapped[str] = mapped_column(String(253), primary_key=True)
    #: GPUs its holding jobs hold
    gpus: Mapped[int] = mapped_column(Integer)
    #: its holding jobs (admitted, dispatched, running)
    running: Mapped[int] = mapped_column(Integer)
    #: its waiting jobs
    pending: Mapped[int] = mapped_column(Integer)
    #: the 95th percentile of the admission waits of the last hour, in seconds
    #: (None: nothing admitted in that hour)
    wait_p95: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: the admissions that percentile is of
    starts: Mapped[int] = mapped_column(Integer)


class UnhealthyJobRow(Base):
    """Since when a running job has been unhealthy in its member (failover's clock).

    Kept so that a restart of Fleet does not reset the clock; the row goes
    when the job is healthy again, ends, or is failed over.
    """

    __tablename__ = "unhealthy_jobs"

    job_id: Mapped[int] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    cluster: Mapped[str] = mapped_column(String(253))
    since: Mapped[float] = mapped_column(Float)
    reason: Mapped[str] = mapped_column(Text, default="")


class LeaseRow(Base):
    """Who leads the scheduler (PostgreSQL; :mod:`fleet.service.leadership`).

    ``term`` grows by one with every new leader; ``expires_at`` is in seconds
    of the database's clock (``clock_timestamp()``), never a replica's.
    """

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(253), default="")
    term: Mapped[int] = mapped_column(Integer, default=0)
    expires_at: Mapped[float] = mapped_column(Float, default=0.0)
    #: the base URL at which the holder serves the API (followers proxy to it)
    address: Mapped[str] = mapped_column(Text, default="")


class JobInboxRow(Base):
    """A job stored by any replica that the leader has not picked up yet (PostgreSQL)."""

    __tablename__ = "job_inbox"

    job_id: Mapped[int] = mapped_column(
        ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
