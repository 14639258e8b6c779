"""The JSON bodies the API answers with: one pydantic model per response, with field docs.

Theory of operation: each route of the HTTP API answers with one of these
models, and :mod:`fleet.api.openapi` documents the routes from the same
models' JSON schemas, so the document cannot drift from the answers.
Field names follow Kubernetes: camelCase in JSON (``priorityClass``), the
Python attribute in snake_case (``priority_class``); both are accepted when
a model is built, and :func:`json_response` writes the camelCase spelling.
A list answers ``{"items": [...]}`` like a Kubernetes list; the job list
adds ``continue``, the opaque token of the next page (absent on the last).
Resource amounts are Kubernetes quantity strings keyed by resource name
(``{"nvidia.com/gpu": "8", "memory": "64Gi"}``; see :func:`quantities`), job
states and admission modes are the core's enums
(:class:`~fleet.core.lifecycle.JobState`, :class:`~fleet.core.jobs.Mode`).
The models are frozen and refuse unknown fields, so a handler that builds
one wrongly fails in its tests, not in a client.
"""

from __future__ import annotations

import datetime
import importlib.metadata
from enum import StrEnum
from typing import Annotated, Final, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from fleet.core.jobs import Mode
from fleet.core.lifecycle import JobState
from fleet.core.resources import Amounts, Resources

#: The media type of every JSON answer.
JSON: Final = "application/json"

#: Resource name -> Kubernetes quantity (``"8"``, ``"500m"``, ``"64Gi"``).
Quantities = Annotated[
    dict[str, str],
    Field(
        description="Resource name -> Kubernetes quantity string "
        '(e.g. {"nvidia.com/gpu": "8", "cpu": "96", "memory": "960Gi"}).'
    ),
]
Count = Annotated[int, Field(ge=0)]


def quantities(amounts: Amounts) -> dict[str, str]:
    """Exact amounts (the core's base units) as quantity strings, sorted by name."""
    return Resources(amounts).to_quantities()


def _absent(value: object) -> bool:
    """A field left out of the JSON when it has no value (a field added later, so that
    answers without it read as they did)."""
    return value is None


class Schema(BaseModel):
    """Base of every response model: camelCase JSON, frozen, no unknown fields."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, frozen=True, extra="forbid"
    )


def json_response(body: Schema, *, status: int = 200) -> web.Response:
    """``body`` as JSON with its camelCase field names."""
    return web.Response(
        status=status,
        body=body.model_dump_json(by_alias=True).encode("utf-8"),
        content_type=JSON,
    )


# Submissions --------------------------------------------------------------------------


class SubmittedJob(Schema):
    """One job of an accepted submission."""

    namespace: str = Field(description="The job's namespace.")
    name: str = Field(description="The job's name.")
    uid: str = Field(
        description="Fleet's identifier of this run of the job: the same when the same spec "
        "is submitted again, a new one when the name starts a new run."
    )
    queue: str = Field(description="The leaf queue the job waits in.")
    state: JobState = Field(description="The job's state now (Queued for a new job).")
    created: bool = Field(
        default=False,
        description="Whether this submission created the job (or a new run of its name); "
        "false when the same job was there already.",
    )


class SubmissionResult(Schema):
    """What a submission created (201), or found already there with the same spec (200)."""

    jobs: list[SubmittedJob] = Field(description="One entry per job, in document order.")
    runtimes: list[str] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="The training runtimes the submission registered (an administrator's): "
        "ClusterTrainingRuntime/name or TrainingRuntime/namespace/name; absent when none.",
    )
    policies: list[str] = Field(
        default_factory=list,
        exclude_if=lambda v: not v,
        description="The PropagationPolicies the submission stored (every one it holds), as "
        "namespace/name; they govern later jobs of their namespaces too; absent when none.",
    )


# Jobs ---------------------------------------------------------------------------------


class ReplicaPlacement(Schema):
    """Where one replica (pod) of an admitted job runs."""

    replica: str = Field(description="The replica: role and index, e.g. Worker-3.")
    node: str = Field(description="The node of the member cluster.")
    gpus: list[Count] = Field(description="GPU indices on that node, lowest first.")


class JobEvent(Schema):
    """One recorded transition or happening in a job's life."""

    time: datetime.datetime = Field(description="When it happened (RFC 3339).")
    type: str = Field(description="What happened: the state entered, or another event kind.")
    reason: str = Field(description="A CamelCase word for why (e.g. Admitted, Preempted).")
    message: str = Field(description="The same for a human reader.")


class PreemptionRecord(Schema):
    """One preemption of a job: when, by which job, why, and through which quota."""

    time: datetime.datetime = Field(description="When it was preempted (RFC 3339).")
    preemptor: str = Field(
        description="namespace/name of the job that needed the room; empty when none did "
        "(a node gone bad, a failover, a quota cut)."
    )
    reason: str = Field(
        description="The cause: Reclaim (a queue took back quota within its min that this "
        "job's queue borrowed), InQueuePriority (a job of higher priority of its queue), "
        "Opportunistic (its opportunistic cells were needed), QuotaCut (its queue stayed "
        "over a lowered limit past the grace), NodeHealth, Failover, Evicted (its member's "
        "nodes changed), ClusterRemoved or MaxRuntime."
    )
    quota_path: list[str] = Field(
        default_factory=list,
        description="The quota tree nodes through which the quota was at stake: for a "
        "reclaim, from this job's leaf up to the lowest node above both leaves and down to "
        "the preemptor's leaf; for a preemption inside a queue, the leaf; for a quota cut, "
        "from the leaf up to the cut node; empty when no quota was at stake.",
    )
    message: str = Field(description="The same for a human reader (its Preempted event's).")


class JobSummary(Schema):
    """A job as the job list shows it."""

    namespace: str = Field(description="The job's namespace.")
    name: str = Field(description="The job's name.")
    api_version: str = Field(
        description="The job document's apiVersion (e.g. kubeflow.org/v1, batch/v1)."
    )
    kind: str = Field(description="The job document's kind (e.g. PyTorchJob, TFJob, Job).")
    uid: str = Field(description="Fleet's identifier of the job.")
    queue: str = Field(description="The leaf queue the job belongs to.")
    state: JobState = Field(description="The job's state.")
    priority_class: str = Field(description="The priority class named by the job.")
    priority: int = Field(description="The class's value; negative is opportunistic.")
    mode: Mode | None = Field(
        default=None,
        description="How the admitted job is charged: guaranteed (within its queue's min), "
        "borrowed (above min) or opportunistic; null while it is not admitted.",
    )
    cluster: str | None = Field(
        default=None, description="The member cluster it was placed in; null before."
    )
    submitted_at: datetime.datetime = Field(description="When it was first submitted.")
    gpus: Count = Field(default=0, description="The GPUs the whole job requests.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="The job document's metadata.labels."
    )
    user: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="Whose per-user limits it counts against (absent: nobody's).",
    )
    reason: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="Why it waits (a waiting job), or why it ended; absent: none (and "
        "while it holds its GPUs).",
    )
    started_at: datetime.datetime | None = Field(
        default=None,
        exclude_if=_absent,
        description="When its current run last started running; absent: never.",
    )
    run_seconds: float | None = Field(
        default=None,
        exclude_if=_absent,
        description="How long it has run since then (a running job) or ran until it stopped "
        "(a job that ended or was preempted); absent: it never ran.",
    )
    estimated_start: EstimatedStart | None = Field(
        default=None,
        exclude_if=_absent,
        description="For a waiting job, when it is expected to start (absent: no forecast).",
    )


class PodSetDetail(Schema):
    """One pod set of a job: pods of one role with the same request."""

    role: str = Field(
        description="The role as the job's kind names it (e.g. Worker, ps, mpiworker)."
    )
    count: Count = Field(description="How many pods the set has (at most, for an elastic job).")
    per_pod: Quantities = Field(description="What each pod of the set requests.")
    minimum: Count | None = Field(
        default=None,
        description="Pods of this set the gang needs, where the kind sets a minimum per set "
        "(a Volcano task's minAvailable); null when it has none of its own.",
    )
    placed: Count = Field(default=0, description="Pods of this set placed now.")
    total: Quantities = Field(
        default_factory=dict,
        description="What the set requests in all: each pod's request times its count.",
    )


class PolicyRef(Schema):
    """The PropagationPolicy that governs a job, and where it came from."""

    namespace: str = Field(description="The policy's namespace (the job's).")
    name: str = Field(description="The policy's name.")
    source: Literal["submission", "stored"] = Field(
        description="submission: the job's own submission held it; stored: a standing "
        "policy of the namespace selected the job."
    )


class JobDetail(Schema):
    """Everything Fleet knows about one job."""

    namespace: str = Field(description="The job's namespace.")
    name: str = Field(description="The job's name.")
    api_version: str = Field(
        description="The job document's apiVersion (e.g. kubeflow.org/v1, batch/v1)."
    )
    kind: str = Field(description="The job document's kind (e.g. PyTorchJob, TFJob, Job).")
    uid: str = Field(description="Fleet's identifier of the job.")
    queue: str = Field(description="The leaf queue the job belongs to.")
    state: JobState = Field(description="The job's state.")
    priority_class: str = Field(description="The priority class named by the job.")
    priority: int = Field(description="The class's value; negative is opportunistic.")
    preemptible: bool = Field(description="Whether other jobs may preempt it.")
    user: str | None = Field(
        default=None,
        exclude_if=_absent,
        description="Whose per-user limits (limits.perUser) it counts against: the name of "
        "the token that submitted it, else its fleet.io/user label; absent: nobody's.",
    )
    mode: Mode | None = Field(
        default=None,
        description="guaranteed, borrowed or opportunistic while admitted; null otherwise.",
    )
    cluster: str | None = Field(
        default=None, description="The member cluster it is placed in; null when not placed."
    )
    request: Quantities = Field(description="What the whole job is charged to its queue.")
    placement: list[ReplicaPlacement] = Field(
        default_factory=list, description="Node and GPUs of every placed replica."
    )
    pod_sets: list[PodSetDetail] = Field(
        default_factory=list, description="The job's pod sets, in placement order."
    )
    gang_minimum: Count = Field(
        default=0,
        description="Pods that must start together (the gang's minimum in total; 1 for a "
        "job whose pods may start one at a time).",
    )
    gpu_types: list[str] = Field(
        default_factory=list,
        description="The GPU types (leaf cell types) the job accepts, in the order they are "
        "tried: the one it names, or those its node-affinity terms on nvidia.com/gpu.* "
        "labels match; empty: any type.",
    )
    gpu_terms: str = Field(
        default="",
        description="What its GPU terms ask, in words (e.g. 'GPU memory > 40960'); empty: none.",
    )
    gpu_type: str | None = Field(
        default=None,
        description="The GPU type its running pods use and its quota is charged for "
        "(gpu.fleet.io/<type>); null when it does not run or names no type.",
    )
    reason: str | None = Field(
        default=None,
        description="Why the job waits, in plain words (e.g. 'queue team-a is full: 16 of "
        "16 GPUs used; this job needs 8'); "
        "null when it does not.",
    )
    unschedulable: str | None = Field(
        default=None,
        description="For a waiting job, its gang's condition as Volcano's PodGroup words it: "
        "'4/4 pods in gang unschedulable (mpimaster 1, mpiworker 3; 4 must start together): "
        "<reason>'; null when it does not wait.",
    )
    suspended: bool = Field(
        default=False,
        description="Its PropagationPolicy pauses it (Karmada's suspension.dispatching). "
        "Such jobs are refused at submission, so this is false for every job accepted since "
        "0.40.0; ACK One's suspension.scheduling only puts a job in the queue, as every job is.",
    )
    policy: PolicyRef | None = Field(
        default=None,
        description="The PropagationPolicy that governs the job (null: none, or not recorded).",
    )
    submitted_at: datetime.datetime = Field(description="When it was first submitted.")
    first_started_at: datetime.datetime | None = Field(
        default=None,
        description="When its pods first all ran (its first Running event); null: never.",
    )
    last_started_at: datetime.datetime | None = Field(
        default=None,
        description="When its pods last started running (its latest Running event; the "
        "first one for a job that ran once); null: never.",
    )
    run_time_seconds: float = Field(
        default=0.0,
        description="Seconds the job has held its quota so far (from each admission to the "
        "run's end, until now for a running job), over all its runs, as its events record "
        "them: the time activeDeadlineSeconds and maxRuntime count.",
    )
    estimated_start: EstimatedStart | None = Field(
        default=None,
        description="For a waiting job, when it is expected to start (null: no forecast yet).",
    )
    preemptions: list[PreemptionRecord] = Field(
        default_factory=list,
        description="Every preemption of the job (or of a growth step of it), oldest first.",
    )
    events: list[JobEvent] = Field(
        default_factory=list, description="Every recorded event, oldest first."
    )


class EstimatedStart(Schema):
    """When a waiting job is expected to start, by the simulator run forward from now."""

    time: datetime.datetime | None = Field(
        description="The expected start, never before the moment of the answer; null when "
        "it is not within the forecast's bounds."
    )
    earliest: datetime.datetime | None = Field(
        default=None,
        description="The start of the range the job is expected to start in: the 10th "
        "percentile of how far earlier estimates were from actual starts (null: no range).",
    )
    latest: datetime.datetime | None = Field(
        default=None,
        description="The end of that range (the 90th percentile of the errors seen).",
    )
    overdue: bool = Field(
        default=False,
        description="The estimated start has passed and the job still waits: it is shown "
        "as starting now, with a range that grows while it stays overdue.",
    )
    declared: bool = Field(
        default=False,
        description="Every run time the estimate rests on was declared "
        "(fleet.io/expected-duration), none taken from a queue's history.",
    )
    assumes: str = Field(
        description="What the estimate assumes: this job's run time and the forecast's rules."
    )
    computed_at: datetime.datetime = Field(description="When the forecast was made.")


class JobStartChange(Schema):
    """A waiting job's estimated start with the tree in force and with a proposed one."""

    job: str = Field(description="namespace/name of the job.")
    queue: str = Field(description="Its leaf queue.")
    current: datetime.datetime | None = Field(
        description="Estimated start with the tree in force (null: not within the horizon)."
    )
    proposed: datetime.datetime | None = Field(
        description="Estimated start with the proposed tree (null: not within the horizon)."
    )
    change: Literal["sooner", "later", "same", "starts", "no longer starts"] = Field(
        description="How the proposal moves its start."
    )


class PreemptionChange(Schema):
    """A running job that a forecast preempts."""

    job: str = Field(description="namespace/name of the job.")
    current: int = Field(description="Preemptions with the tree in force.")
    proposed: int = Field(description="Preemptions with the proposed tree.")


class QueueWait(Schema):
    """A leaf queue's mean expected wait over its waiting jobs that start within the horizon."""

    name: str = Field(description="The leaf queue.")
    current_wait_seconds: float | None = Field(description="With the tree in force.")
    proposed_wait_seconds: float | None = Field(description="With the proposed tree.")


class QuotaTreeSimulation(Schema):
    """What replacing the quota tree would do to the live queue, before anyone applies it."""

    computed_at: datetime.datetime = Field(description="The live state the forecasts start from.")
    horizon_seconds: float = Field(description="Simulated time each forecast covers at most.")
    assumes: str = Field(description="What the forecasts assume.")
    jobs: list[JobStartChange] = Field(description="Every waiting job, in queue order.")
    preempted: list[PreemptionChange] = Field(
        description="Running jobs that either forecast preempts."
    )
    queues: list[QueueWait] = Field(description="Expected waits per leaf queue with waiting jobs.")


class JobEventEntry(Schema):
    """One event of a job's log, with the job it belongs to."""

    namespace: str = Field(description="The job's namespace.")
    name: str = Field(description="The job's name.")
    uid: str = Field(description="Fleet's identifier of the job's run.")
    time: datetime.datetime = Field(description="When it happened (RFC 3339).")
    type: str = Field(description="Normal or Warning.")
    reason: str = Field(description="A CamelCase word for why (e.g. Admitted, Preempted).")
    message: str = Field(description="The same for a human reader.")


class JobEventList(Schema):
    """The newest events of jobs, newest first."""

    items: list[JobEventEntry] = Field(description="The events, newest first.")


class JobList(Schema):
    """One page of jobs."""

    items: list[JobSummary] = Field(description="The jobs of this page.")
    continue_: str | None = Field(
        default=None,
        alias="continue",
        description="Pass as the continue parameter to get the next page; "
        "absent or null on the last page.",
    )


# Queues -------------------------------------------------------------------------------


class PerUserUse(Schema):
    """What one user's holding jobs (admitted, dispatched, running) hold in a leaf."""

    user: str = Field(description="The user: a token's name, or a job's fleet.io/user label.")
    running_jobs: int = Field(description="The user's holding jobs in the queue.")
    resources: Quantities = Field(description="What those jobs request, growth steps included.")


class PerUser(Schema):
    """A leaf's per-user limits and each user's current use."""

    limits: dict[str, str] = Field(
        description="The leaf's limits.perUser: runningJobs and resource quantities."
    )
    users: list[PerUserUse] = Field(
        default_factory=list, description="Every user holding something there, by name."
    )


class _QueueFields(Schema):
    name: str = Field(description="The node's name in the quota tree.")
    parent: str | None = Field(description="The parent node; null for the root.")
    leaf: bool = Field(description="Whether it is a leaf, i.e. a queue jobs are submitted to.")
    namespaces: list[str] = Field(
        default_factory=list, description="Namespaces whose jobs land here (leaves only)."
    )
    min: Quantities = Field(description="The guaranteed share; resources not listed are 0.")
    max: Quantities = Field(description="The limit; resources not listed are unlimited.")
    used: Quantities = Field(description="What admitted jobs use, in this node's subtree.")
    borrowed: Quantities = Field(description="The part of used that is above min.")
    admitted: Count = Field(description="Admitted (holding) jobs in this node's subtree.")
    fair_share: FairShare | None = Field(
        default=None,
        exclude_if=_absent,
        description="Leaves only: the queue's fair share and why (absent: not a leaf).",
    )
    per_user: PerUser | None = Field(
        default=None,
        exclude_if=_absent,
        description="A leaf's limits.perUser with each user's current use; absent: none.",
    )


class FairShare(Schema):
    """A leaf queue's fair share: what orders borrowing among queues and reclaims."""

    weight: float = Field(description="The queue's fairSharing.weight (default 1).")
    half_life_seconds: float = Field(
        description="The fairSharing.halfLife in force, in seconds (0: no memory)."
    )
    decayed_usage: dict[str, float] = Field(
        description="Decayed usage per resource in resource-hours (cpu in cores, memory in "
        "GiB); empty without memory."
    )
    share: float | None = Field(
        description="The fairness key: decayed usage (without memory, usage) over min "
        "(else max) and weight, the largest over the resources; lower borrows first and "
        "gives back last. Null without min or max."
    )
    rank: Annotated[int, Field(ge=1)] = Field(
        description="Its place among its parent's leaf queues (1: borrows first)."
    )
    siblings: Annotated[int, Field(ge=1)] = Field(
        description="How many leaf queues its parent has, itself included."
    )
    explanation: str = Field(description="Why it comes where it does, in a sentence.")


class QueueSummary(_QueueFields):
    """One node of the quota tree, as ``kubectl get queue`` would show it."""

    pending: Count = Field(description="Jobs waiting in this node's subtree.")


class QueueList(Schema):
    """Every node of the quota tree, parents before their children."""

    items: list[QueueSummary] = Field(description="The nodes of the tree.")


HistorySeries = Literal["gpus", "running", "pending", "wait"]
#: The unit of each series of ``GET /api/v1/history``.
HISTORY_UNITS: Final[dict[str, str]] = {
    "gpus": "GPUs",
    "running": "jobs",
    "pending": "jobs",
    "wait": "seconds",
}


class HistoryPoint(Schema):
    """One sample of a series: each leaf queue's value and the whole fleet's."""

    time: datetime.datetime = Field(description="When the sample was taken.")
    queues: dict[str, float | None] = Field(
        description="Leaf queue -> its value (wait: null when nothing was admitted in the "
        "hour before)."
    )
    fleet: float | None = Field(
        description="The whole fleet's value (GPUs: what the members' cells hold, "
        "opportunistic jobs included; wait: the p95 of every queue's admissions)."
    )


class History(Schema):
    """One series over time, as the service sampled it (``history_interval``)."""

    series: HistorySeries = Field(
        description="gpus: GPUs used; running: holding jobs; pending: waiting jobs (queue "
        "depth); wait: the 95th percentile of the admission waits of the hour before."
    )
    unit: str = Field(description="GPUs, jobs or seconds.")
    since: datetime.datetime = Field(description="The first time asked for.")
    interval: float = Field(
        description="Seconds between two samples (0: sampling is off on the service)."
    )
    retention: float = Field(description="Seconds a sample is kept.")
    queues: list[str] = Field(description="The leaf queues that appear, by name.")
    points: list[HistoryPoint] = Field(description="The samples, oldest first.")


class PendingJob(Schema):
    """A job waiting in a queue."""

    position: Annotated[int, Field(ge=1)] = Field(
        description="1 for the head of the queue, in admission order."
    )
    job: str = Field(description="namespace/name of the job.")
    api_version: str | None = Field(
        default=None, description="The job document's apiVersion (null: not read)."
    )
    kind: str | None = Field(default=None, description="The job document's kind (null: not read).")
    priority: int = Field(description="The job's priority value.")
    priority_class: str = Field(description="The job's priority class.")
    request: Quantities = Field(description="What admitting it would charge the queue.")
    reason: str = Field(description="Why it is not admitted yet.")
    estimated_start: EstimatedStart | None = Field(
        default=None, description="When it is expected to start (null: no forecast yet)."
    )


class QueueDetail(_QueueFields):
    """One node of the quota tree with its waiting jobs."""

    pending: list[PendingJob] = Field(description="The waiting jobs in order, head first.")


# Clusters -----------------------------------------------------------------------------


class ClusterHealth(StrEnum):
    """How a member cluster is doing."""

    HEALTHY = "Healthy"
    DEGRADED = "Degraded"  # reachable, some nodes out of allocation
    UNREACHABLE = "Unreachable"
    UNKNOWN = "Unknown"  # not heard from yet


class GpuCounts(Schema):
    """GPUs in all, in use and free."""

    total: Count = Field(description="GPUs that exist (bad nodes included).")
    used: Count = Field(description="GPUs held by admitted jobs.")
    free: Count = Field(description="GPUs neither used nor on a bad node.")


class VirtualClusterGpus(Schema):
    """GPUs of one virtual cluster (named after the leaf queue it serves)."""

    name: str = Field(description="The virtual cluster, i.e. the leaf queue.")
    gpus: GpuCounts = Field(description="Its guaranteed GPUs, in use and free.")
    doomed_cells: Count = Field(
        default=0, description="Its virtual cells that bad nodes leave no physical cell for."
    )


class GpuTypeCount(Schema):
    """GPUs of one product in a member described by its nodes."""

    product: str = Field(description="The GPU product (nvidia.com/gpu.product).")
    gpus: Count = Field(description="Its GPUs in the member's cells.")
    nodes: Count = Field(description="The nodes that have GPUs of it.")


class VcShortfall(Schema):
    """A virtual cluster request the member's nodes cannot hold now (the VC keeps what
    they can hold)."""

    vc: str = Field(description="The virtual cluster.")
    path: str = Field(description="The request's field path in the MemberCluster.")
    asked: str = Field(description="What it asks, e.g. '4 node(s) within one rack'.")
    held: Count = Field(description="How many of its nodes or GPUs (or cells) are held.")
    reason: str = Field(description="Why no more can be held.")


class ClusterNodes(Schema):
    """What a member described by its nodes (spec.topology) has now."""

    nodes: Count = Field(description="Nodes in its cells.")
    gpu_types: list[GpuTypeCount] = Field(
        default_factory=list, description="Its GPUs by product, by name."
    )
    shortfalls: list[VcShortfall] = Field(
        default_factory=list, description="Virtual cluster requests it cannot hold now."
    )


class ClusterSummary(Schema):
    """A member cluster and its GPUs."""

    name: str = Field(description="The MemberCluster's name.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Its labels, matched by clusterAffinity."
    )
    simulated: bool = Field(description="Whether Fleet runs its jobs in process.")
    health: ClusterHealth = Field(description="Healthy, Degraded, Unreachable or Unknown.")
    message: str = Field(
        default="",
        description="What the member backend says: why it is not ready, or how it is doing "
        "(admin tokens only; others read 'ready' or 'not ready').",
    )
    bad_nodes: list[str] = Field(default_factory=list, description="Nodes taken out of allocation.")
    draining: bool = Field(
        default=False, description="Nothing new is admitted; removed once its jobs ended."
    )
    gpus: GpuCounts = Field(description="All GPUs of the cluster.")
    virtual_clusters: list[VirtualClusterGpus] = Field(
        default_factory=list, description="Per virtual cluster, in config order."
    )
    topology: ClusterNodes | None = Field(
        default=None,
        description="For a member whose cells are built from its nodes' labels: its nodes, "
        "GPU products and the virtual cluster requests it cannot hold now.",
    )


class ClusterList(Schema):
    """Every member cluster."""

    items: list[ClusterSummary] = Field(description="The clusters, by name.")


# Policies -----------------------------------------------------------------------------


class PolicySummary(Schema):
    """A standing PropagationPolicy, as the policy list shows it."""

    namespace: str = Field(description="The policy's namespace: it selects jobs there only.")
    name: str = Field(description="The policy's name.")
    api_version: str = Field(
        description="policy.karmada.io/v1alpha1 or policy.one.alibabacloud.com/v1alpha1."
    )
    priority: int = Field(
        description="spec.priority: among policies that select a job, the highest applies."
    )
    selects: list[str] = Field(
        description="Its resourceSelectors, each as Kind, Kind/name or Kind{labels}."
    )
    created: datetime.datetime = Field(description="When it was first stored.")
    updated: datetime.datetime = Field(description="When it was last stored.")
    author: str = Field(description="The token that stored it last.")


class PolicyList(Schema):
    """Standing PropagationPolicies, by namespace and name."""

    items: list[PolicySummary] = Field(
        description="The policies (a team token's: those of its namespaces)."
    )


# Service ------------------------------------------------------------------------------


def _package_version() -> str:
    try:
        return importlib.metadata.version("fleet")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Liveness(Schema):
    """The process answers."""

    status: str = Field(default="ok", description="Always ok.")
    version: str = Field(
        default_factory=_package_version, description="The server's Fleet version."
    )
    role: str | None = Field(
        default=None,
        description="single (SQLite: this process schedules), leader (it runs the scheduler "
        "of a PostgreSQL database) or follower (it serves and forwards to the leader).",
    )
    term: int | None = Field(
        default=None, description="The leader's term as this replica last saw it (PostgreSQL)."
    )
    leader: str | None = Field(
        default=None, description="The base URL of the replica that leads, when one does."
    )


class Readiness(Schema):
    """Whether the service can take requests, and what it checked."""

    ready: bool = Field(description="Whether every check passed.")
    checks: dict[str, str] = Field(
        default_factory=dict, description="Check name -> ok, or what is wrong."
    )


#: Every response model, for the OpenAPI document.
RESPONSE_MODELS: Final[tuple[type[Schema], ...]] = (
    SubmissionResult,
    JobList,
    JobDetail,
    QueueList,
    QueueDetail,
    ClusterList,
    PolicyList,
    PolicySummary,
    Liveness,
    Readiness,
)
