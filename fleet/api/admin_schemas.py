"""The JSON bodies of the administration routes: tree changes, history, node health, audit.

Theory of operation: like :mod:`fleet.api.schemas` (camelCase, frozen, no
unknown fields); the two request bodies read here (:class:`NodePatch`,
:class:`NodeHealthChange`) are documented from the same models, so the
OpenAPI document says exactly what is accepted.
"""

from __future__ import annotations

import datetime
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictStr

from fleet.api.schemas import Schema

#: Longest reason for a node's health (characters).
MAX_REASON: int = 1000


class AuditKind(StrEnum):
    """What a write was about."""

    SUBMISSION = "submission"
    CANCEL = "cancel"
    QUOTA_TREE = "quota-tree"
    CLUSTER = "cluster"
    NODE_HEALTH = "node-health"
    POLICY = "policy"


class OverLimitNode(Schema):
    """A node of the tree over one of its limits (after the change)."""

    node: str = Field(description="The node's name.")
    leaf: bool = Field(description="Whether the node is a leaf queue.")
    limit: Literal["max", "min"] = Field(
        description="max: usage above the max; min: guaranteed usage above the min (a leaf)."
    )
    resource: str = Field(description="The first resource over the limit.")
    used: str = Field(description="What is used of it (a quantity).")
    allowed: str = Field(description="What the limit allows (a quantity).")
    reclaimable: list[str] = Field(
        description="namespace/name of the running jobs that keep the node over, newest "
        "first: the first reclaim victims, and what --quota-cut-grace preempts."
    )


class MovedJob(Schema):
    """A job whose namespace now belongs to another leaf."""

    job: str = Field(description="namespace/name.")
    from_queue: str = Field(description="The leaf it was in.")
    to_queue: str = Field(description="The leaf it moves to.")


class FailedJob(Schema):
    """A job no leaf takes any more: it is failed."""

    job: str = Field(description="namespace/name.")
    reason: str = Field(description="Why.")


class Overpromised(Schema):
    """One resource the tree guarantees beyond the members' healthy capacity."""

    resource: str = Field(
        description="nvidia.com/gpu, cpu, memory, or gpu.fleet.io/<type> for one GPU type."
    )
    promised: str = Field(
        description="What the tree guarantees: its root's children's min in sum, or the "
        "root's own min where it is written and larger (a quantity)."
    )
    held: str = Field(
        description="The healthy capacity of the member clusters in service: bad nodes and "
        "draining clusters left out (a quantity)."
    )
    short: str = Field(description="promised - held (a quantity).")


class TreeChange(Schema):
    """What a quota tree change did, or (``dryRun``) would do right now."""

    dry_run: bool = Field(description="True: nothing was changed.")
    version: int | None = Field(description="The new version; null for a dry run.")
    over_limit: list[OverLimitNode] = Field(description="Nodes over a limit, in tree order.")
    moved: list[MovedJob] = Field(description="Jobs whose queue changes.")
    failed: list[FailedJob] = Field(description="Jobs failed because no leaf takes them.")
    warnings: list[str] = Field(default_factory=list, description="The tree's warnings.")
    overpromised: list[Overpromised] = Field(
        default_factory=list,
        description="What the tree promises beyond what the members hold, per resource "
        "and GPU type; empty when it promises no more than exists. A report, not an error: "
        "the tree is applied all the same.",
    )


class TreeVersion(Schema):
    """One version of the quota tree."""

    version: int = Field(ge=1, description="1 for the first tree, then one more per change.")
    author: str = Field(description="Who made it (a token name, or how it was loaded).")
    created_at: datetime.datetime = Field(description="When.")
    diff: str = Field(description="Unified diff from the previous version's document.")


class TreeHistory(Schema):
    """A page of tree versions, newest first."""

    items: list[TreeVersion]
    continue_: str | None = Field(
        default=None, alias="continue", description="Token of the next page; absent on the last."
    )


class NodePatch(Schema):
    """A JSON merge patch of one node: the fields that may change (null removes one)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min: dict[str, StrictStr | int | None] | None = Field(
        default=None, description="Resources to set (null removes one; null for all: none)."
    )
    max: dict[str, StrictStr | int | None] | None = Field(
        default=None, description="Resources to set (null removes one; null for all: unlimited)."
    )
    namespaces: list[StrictStr] | None = Field(
        default=None, description="The leaf's namespaces, replacing the old list."
    )
    preempt_min_runtime: StrictStr | None = Field(
        default=None, description="A duration (e.g. 10m); null: inherit the parent's."
    )
    reclaim_min_runtime: StrictStr | None = Field(
        default=None, description="A duration (e.g. 10m); null: inherit the parent's."
    )
    max_runtime: StrictStr | None = Field(
        default=None,
        description="A duration (e.g. 24h): a job that runs that long ends; null: inherit.",
    )
    max_runtime_action: Literal["Fail", "Requeue"] | None = Field(
        default=None, description="What maxRuntime does to a job: Fail or Requeue; null: inherit."
    )


class NodeHealthChange(Schema):
    """Mark a node bad or healthy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    healthy: StrictBool = Field(description="false: take the node out; true: put it back.")
    reason: Annotated[str, Field(max_length=MAX_REASON)] = Field(
        default="", description="Why (shown in the preempted jobs' events)."
    )


class NodeHealthResult(Schema):
    """A node's health as recorded, and the jobs preempted because of it."""

    cluster: str
    node: str
    healthy: bool
    reason: str
    preempted: list[str] = Field(description="namespace/name of the jobs preempted now.")


class AuditRecord(Schema):
    """One write through the API."""

    id: int = Field(ge=1, description="Increasing; newer records have larger ids.")
    time: datetime.datetime
    actor: str = Field(description="The token's name.")
    kind: AuditKind
    operation: str = Field(description="The route's operation id.")
    method: str
    path: str
    status: Annotated[int, Field(ge=100, le=599)] = Field(description="The answer's status.")
    detail: str = Field(description="The problem's detail when refused; empty otherwise.")


class AuditList(Schema):
    """A page of audit records, newest first."""

    items: list[AuditRecord]
    continue_: str | None = Field(
        default=None, alias="continue", description="Token of the next page; absent on the last."
    )


class ClusterChange(Schema):
    """What a member cluster PUT or DELETE did."""

    name: str
    created: bool = Field(description="True: a new member; false: its config was replaced.")
    draining: bool = Field(
        description="True: nothing new is admitted there; it is removed once its jobs ended."
    )
    running: list[str] = Field(description="namespace/name of the jobs running there now.")
