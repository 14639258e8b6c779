"""The JSON bodies of the dashboard's read routes: who is asking, the change stream, cell maps.

Theory of operation: like :mod:`fleet.api.schemas` (camelCase, frozen, no
unknown fields).  These routes exist so that a client of the public API (the
dashboard of :mod:`fleet.ui` is one) can show what a person wants to see
without a private back door: which role its token has, what changed since it
last looked (:class:`ViewChange`, one server-sent event each), and which job
holds which GPU of every node of a member cluster (:class:`ClusterCells`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from fleet.api.schemas import Count, Schema
from fleet.core.jobs import Mode
from fleet.core.lifecycle import JobState


class WhoAmI(Schema):
    """The caller as the service sees its bearer token."""

    name: str = Field(description="The token's name (the audit log's actor).")
    role: Literal["admin", "team"] = Field(description="admin: everything; team: its queues.")
    queues: list[str] = Field(
        default_factory=list, description="The leaf queues a team token may submit and cancel in."
    )
    namespaces: list[str] = Field(
        default_factory=list,
        description="The namespaces a team token may submit and cancel in: those its "
        "leaf queues list in the quota tree in force (empty for an admin, who acts anywhere).",
    )
    tokens_required: bool = Field(
        description="Whether the service checks bearer tokens (false: every caller is admin)."
    )


class ViewChange(Schema):
    """One published view of the scheduler: the data of one ``view`` server-sent event."""

    version: Annotated[int, Field(ge=0)] = Field(
        description="The view's version (also the event's id); increases by one per view."
    )
    time: float = Field(description="The scheduler's clock when it was published (Unix seconds).")
    jobs: list[str] = Field(
        description="namespace/name of the jobs that changed since the version the client "
        "had: submitted, moved to another state, or given another waiting reason."
    )
    complete: bool = Field(
        description="false: more changed than the service remembers (the client had a version "
        "too old); read everything again."
    )


class GpuCell(Schema):
    """One GPU (leaf cell) of a node, and the job that holds it."""

    index: Count = Field(description="The GPU index on its node.")
    job: str | None = Field(default=None, description="namespace/name of the holder; null: free.")
    queue: str | None = Field(
        default=None, description="The holder's leaf queue, i.e. its virtual cluster."
    )
    priority: int | None = Field(default=None, description="The holder's priority value.")
    priority_class: str | None = Field(default=None, description="The holder's priority class.")
    mode: Mode | None = Field(
        default=None, description="How the holder is charged: guaranteed, borrowed, opportunistic."
    )
    state: JobState | None = Field(default=None, description="The holder's state.")


class NodeCells(Schema):
    """One node of a member cluster with its GPUs."""

    name: str = Field(description="The node's name.")
    gpu_type: str = Field(description="The leaf cell type (GPU SKU) of its GPUs.")
    healthy: bool = Field(description="false: marked bad, out of allocation.")
    reason: str = Field(default="", description="Why it is marked bad.")
    cells: list[GpuCell] = Field(description="Its GPUs by index.")


class ClusterCells(Schema):
    """Every node of a member cluster as a row of GPU cells (one page of nodes)."""

    name: str = Field(description="The member cluster.")
    nodes: list[NodeCells] = Field(description="The nodes of this page, in config order.")
    total_nodes: Count = Field(description="Nodes of the cluster (all pages).")
    free_gpus: Count = Field(description="GPUs neither held nor on a bad node (all pages).")
    whole_free_nodes: Count = Field(description="Healthy nodes with every GPU free.")
    fragmented_gpus: Count = Field(
        description="Free GPUs on healthy nodes that are partly held: free, but not as whole nodes."
    )
    continue_: str | None = Field(
        default=None,
        alias="continue",
        description="Pass as the continue parameter to get the next page of nodes.",
    )
