"""Pydantic models of Fleet's own objects: quota tree, policy, member cluster.

Theory of operation: a model checks the *shape* of one document (types,
enums, ranges, required fields) and pydantic reports each problem with its
location, which :mod:`fleet.manifests.documents` turns into a dotted field path.
Checks that need more than one field, or that must name a map key in the
path (quantities, GPU SKU, annotations, cell configs), live in each top-level
model's ``problems()``, which returns ``(path, message)`` pairs and never
raises.  Nothing here needs the quota tree or the member clusters: those
checks are in :mod:`fleet.manifests.convert`.  The workload kinds' models
are in :mod:`fleet.manifests.kinds`, on the bases and field types defined
here; only Fleet places pods, and a job that carries a label or annotation
Fleet writes itself (:data:`FLEET_WRITTEN_KEYS`) is refused at that field
(:mod:`fleet.manifests.kinds.pods`).

Fleet owns the schema of ``ElasticQuotaTree``, ``PropagationPolicy`` and
``MemberCluster``: unknown fields are rejected (``extra="forbid"``) so a typo
never passes silently.  A workload kind belongs to its project: its model
keeps unknown fields (``extra="allow"``), validates what Fleet reads, and the
kind's own CRD schema judges the rest (:mod:`fleet.manifests.kinds.schema`).  Object
``metadata`` is Kubernetes' and is tolerant everywhere.  Field names are the
Kubernetes camelCase spellings (aliases); quantities stay as written until
:func:`parse_resources` turns them into exact :class:`Resources`.  Every name
and namespace is checked by the one rule of :mod:`fleet.manifests.names`,
which matches the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from fleet.core import resources
from fleet.core.cells.config import label_problem
from fleet.core.cells.spec import CellConfig, CellConfigError
from fleet.core.quota import MaxRuntimeAction, QuotaNodeSpec
from fleet.core.quota_rules import MAX_WEIGHT, RUNNING_JOBS, node_message
from fleet.core.resources import QuantityError, Resources
from fleet.manifests import _cells, topology
from fleet.manifests.errors import Problem, quote, shorten_quoted
from fleet.manifests.names import NAMESPACE, OBJECT_NAME, NameRule, name_problem

GPU_PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
GPU_TYPE_ANNOTATION: Final = "fleet.io/gpu-type"
#: HiveD's pinnedCellId: the job runs only inside that pinned physical cell.
PINNED_CELL_ANNOTATION: Final = "fleet.io/pinned-cell-id"
PREEMPTIBLE_ANNOTATION: Final = "fleet.io/preemptible"
SIM_DURATION_ANNOTATION: Final = "fleet.io/simulated-duration"
SIM_OUTCOME_ANNOTATION: Final = "fleet.io/simulated-outcome"
SIM_OUTCOMES: Final = ("Succeeded", "Failed")
#: On the pod templates of a JobSet (and of a TrainJob's runtime) in a member: the pods
#: one Job of its replicated job runs at once (:mod:`fleet.manifests.kinds.jobset`).
PODS_PER_JOB_ANNOTATION: Final = "fleet.io/pods-per-job"
#: On a stored TrainJob: the effective runtime it was planned with
#: (:mod:`fleet.manifests.kinds.trainjob`); the member's runtime is made from it.
TRAINING_RUNTIME_ANNOTATION: Final = "fleet.io/training-runtime"
#: The labels and annotations Fleet itself writes on the jobs it creates in a
#: member and on their pods (:mod:`fleet.clusters.kube.objects`, the pod binder), and
#: reads back: a submission that carries one is refused
#: (:func:`fleet.manifests.kinds.pods.written_key_problems`).
#: The label that names a job's user where no token does (a server without tokens,
#: the hub's objects): whose ``limits.perUser`` the job counts against.
USER_LABEL: Final = "fleet.io/user"
FLEET_WRITTEN_KEYS: Final = frozenset(
    {
        "fleet.io/job-uid",
        "fleet.io/queue",
        "fleet.io/cluster",
        "fleet.io/job",
        "fleet.io/placement",
        "fleet.io/gpu-indices",
        "fleet.io/replica",
        PODS_PER_JOB_ANNOTATION,
        TRAINING_RUNTIME_ANNOTATION,
    }
)
#: Pod fields that say where or by whom a pod is placed: Fleet's to set alone.
FLEET_PLACES: Final = {
    "nodeName": "only Fleet places pods; remove it",
    "schedulerName": "only Fleet places pods (it names its own scheduler on every pod); remove it",
}

QUOTA_API: Final = "scheduling.sigs.k8s.io/v1beta1"
ACK_POLICY_API: Final = "policy.one.alibabacloud.com/v1alpha1"
KARMADA_POLICY_API: Final = "policy.karmada.io/v1alpha1"
FLEET_API: Final = "fleet.io/v1alpha1"

_DURATION_RE: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h))+")
_DURATION_PART_RE: Final = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _name_of(rule: NameRule) -> PlainValidator:
    """A pydantic validator of one name syntax (:func:`fleet.manifests.names.name_problem`)."""

    def check(value: object) -> str:
        if not isinstance(value, str):
            raise ValueError("must be a string")
        problem = name_problem(value, rule, quote(value))
        if problem is not None:
            raise ValueError(problem)
        return value

    return PlainValidator(check)


def _quantity(value: object) -> int | float | str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{quote(value)} is not a Kubernetes quantity (a number or a string)")
    try:
        resources.parse_value(value)
    except QuantityError as e:
        raise ValueError(_quantity_message(e, value)) from None
    return value


def _quantity_message(error: QuantityError, value: object) -> str:
    """The core's message about a quantity, quoting at most a prefix of it."""
    return shorten_quoted(str(error), value) if isinstance(value, str) else str(error)


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as ``90s``, ``5m``, ``1h30m`` or ``500ms``."""
    if _DURATION_RE.fullmatch(text) is None:
        raise ValueError(f"{quote(text)} is not a duration (examples: 90s, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART_RE.findall(text))


def _duration(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"a duration is text such as 90s, 5m or 1h30m, not {quote(value)}")
    parse_duration(value)
    return value


Name = Annotated[str, _name_of(OBJECT_NAME)]
Duration = Annotated[str, PlainValidator(_duration)]
NamespaceName = Annotated[str, _name_of(NAMESPACE)]
Quantity = Annotated[int | float | str, PlainValidator(_quantity)]
QuantityMap = dict[str, Quantity]
Count = Annotated[StrictInt, Field(ge=1)]
#: Fleet expands every replica of a job into a pod; more than this is a typo, not a job.
MAX_REPLICAS: Final = 10_000
ReplicaCount = Annotated[StrictInt, Field(ge=1, le=MAX_REPLICAS)]


class _Owned(BaseModel):
    """Fleet's own schema: unknown fields are errors."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class _Foreign(BaseModel):
    """Someone else's schema: keep unknown fields, validate what Fleet reads."""

    model_config = ConfigDict(
        extra="allow", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class ObjectMeta(_Foreign):
    name: Name
    namespace: NamespaceName | None = None
    labels: dict[str, StrictStr] = Field(default_factory=dict)
    annotations: dict[str, StrictStr] = Field(default_factory=dict)

    @property
    def namespace_or_default(self) -> str:
        return self.namespace or "default"

    @property
    def key(self) -> str:
        """``namespace/name``, with Kubernetes' ``default`` namespace when none is set."""
        return f"{self.namespace_or_default}/{self.name}"


class Namespaced:
    """A document in a namespace: its ``metadata``'s namespace (``default`` if unset) and key."""

    if TYPE_CHECKING:
        metadata: ObjectMeta

    @property
    def namespace(self) -> str:
        return self.metadata.namespace_or_default

    @property
    def key(self) -> str:
        return self.metadata.key


#: Resource names Kubernetes accepts without a domain prefix (plus ``hugepages-<size>``).
STANDARD_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage", "storage", "pods")


def resource_name_problem(name: str) -> str | None:
    """Why ``name`` is not a resource name Kubernetes would accept, or None.

    A name without a domain must be a standard one; anything else (``gpu``,
    ``gpus``) is a typo that would otherwise silently ask for nothing.
    """
    if "/" in name or name in STANDARD_RESOURCES or name.startswith("hugepages-"):
        return None
    msg = (
        f"{quote(name)} is not a Kubernetes resource name (a name without a domain must be one of "
        f"{', '.join(STANDARD_RESOURCES)}, hugepages-<size>)"
    )
    if "gpu" in name.lower():
        msg += f"; GPUs are {resources.GPU!r}"
    return msg


def parse_resources(
    quantities: Mapping[str, Any], path: str, *, limits: bool = False
) -> tuple[Resources, list[Problem]]:
    """Parse ``{resource: quantity}`` exactly; problems name ``path.<resource>``.

    ``limits`` keeps resources given as 0 (:meth:`Resources.limits`).
    """
    values: dict[str, int] = {}
    problems: list[Problem] = []
    for name, text in quantities.items():
        bad_name = resource_name_problem(name)
        if bad_name is not None:
            problems.append((f"{path}.{name}", bad_name))
            continue
        try:
            values[name] = resources.parse_quantity(name, text)
        except QuantityError as e:
            # The path already names the resource: drop the core's "name: " prefix.
            message = _quantity_message(e, text).removeprefix(f"{name}: ")
            problems.append((f"{path}.{name}", message))
    return (Resources.limits(values) if limits else Resources(values)), problems


# ElasticQuotaTree ----------------------------------------------------------------


class FairSharingModel(_Owned):
    """``fairSharing`` of a tree node (:mod:`fleet.core.fair_share`), inherited by its subtree."""

    #: how fast past usage is forgotten (``24h``); ``0``: no memory (the instant usage)
    half_life: Duration | None = None
    #: the node's weight against its siblings (default 1)
    weight: Annotated[StrictInt | StrictFloat, Field(gt=0, le=MAX_WEIGHT)] | None = None


class QuotaLimitsModel(_Owned):
    """A leaf's ``limits``: ``perUser`` caps what one user's jobs hold in the queue
    (``runningJobs``: a count of jobs; any other key a resource quantity)."""

    per_user: dict[str, Any] | None = None

    def to_per_user(self, node: str, path: str, problems: list[Problem]) -> Resources | None:
        """``perUser`` as the core keeps it (``runningJobs`` as ``kube-queue/max-jobs``);
        problems name ``path.perUser.<field>``."""
        if self.per_user is None:
            return None
        where = f"{path}.perUser"
        quantities: dict[str, Any] = {}
        values: dict[str, int] = {}
        for name, value in self.per_user.items():
            if name == RUNNING_JOBS:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    what = f"runningJobs must be a whole number of jobs, 0 or more, not {value!r}"
                    problems.append((f"{where}.{name}", node_message(node, what)))
                else:
                    values[resources.MAX_JOBS] = value
            elif name == resources.MAX_JOBS:
                what = "a user's jobs are counted by runningJobs"
                problems.append((f"{where}.{name}", node_message(node, what)))
            else:
                quantities[name] = value
        parsed, found = parse_resources(quantities, where, limits=True)
        problems.extend((p, node_message(node, m)) for p, m in found)
        return Resources.limits({**values, **parsed.amounts})


class QuotaNodeModel(_Owned):
    name: Name
    min: QuantityMap | None = None
    max: QuantityMap | None = None
    namespaces: list[NamespaceName] = Field(default_factory=list)
    children: list[QuotaNodeModel] = Field(default_factory=list)
    #: Fleet's own fields (durations such as ``10m``), inherited by children unless set.
    preempt_min_runtime: Duration | None = None
    reclaim_min_runtime: Duration | None = None
    #: Fleet's own fields: a job of the subtree whose run time reaches ``maxRuntime``
    #: fails, or is queued again afresh (``maxRuntimeAction``); inherited unless set.
    max_runtime: Duration | None = None
    max_runtime_action: Literal["Fail", "Requeue"] | None = None
    #: Fleet's own field, on the root only: ``auto`` leaves the root's ``min`` and ``max``
    #: to Fleet, the members' healthy capacity (:mod:`fleet.core.inventory`).
    capacity: Literal["auto"] | None = None
    #: Fleet's own field: fair share with memory (:class:`FairSharingModel`)
    fair_sharing: FairSharingModel | None = None
    #: Fleet's own field, on leaves only: ``{perUser: {runningJobs: 4, nvidia.com/gpu: 16}}``
    #: caps what each user's jobs hold in the queue (:mod:`fleet.core.user_limits`).
    limits: QuotaLimitsModel | None = None

    def to_spec(self, path: str, problems: list[Problem], *, root: bool = False) -> QuotaNodeSpec:
        """The exact core node (``path`` names it); quantity problems, naming it, are appended.

        ``root``: the node is the tree's root, the one node that may say ``capacity: auto``.
        """
        auto = self.capacity == "auto"
        if auto and not root:
            what = "capacity: auto is for the root node only (the members' capacity is the root's)"
            problems.append((f"{path}.capacity", node_message(self.name, what)))
        elif auto:
            for field, given in (("min", self.min), ("max", self.max)):
                if given is not None:
                    what = (
                        f"capacity: auto makes the root's {field} the members' healthy capacity; "
                        f"remove {field}, or remove capacity to write the figures"
                    )
                    problems.append((f"{path}.{field}", node_message(self.name, what)))
        min_, p1 = parse_resources(self.min or {}, f"{path}.min")
        max_: Resources | None = None
        problems.extend((p, node_message(self.name, m)) for p, m in p1)
        if self.max is not None:
            max_, p2 = parse_resources(self.max, f"{path}.max", limits=True)
            problems.extend((p, node_message(self.name, m)) for p, m in p2)
        children = tuple(
            child.to_spec(f"{path}.children[{i}]", problems)
            for i, child in enumerate(self.children)
        )
        return QuotaNodeSpec(
            name=self.name,
            min=min_,
            max=max_,
            namespaces=tuple(self.namespaces),
            children=children,
            path=path,
            preempt_min_runtime=None
            if self.preempt_min_runtime is None
            else parse_duration(self.preempt_min_runtime),
            reclaim_min_runtime=None
            if self.reclaim_min_runtime is None
            else parse_duration(self.reclaim_min_runtime),
            auto=auto and root,
            fair_half_life=None
            if self.fair_sharing is None or self.fair_sharing.half_life is None
            else parse_duration(self.fair_sharing.half_life),
            fair_weight=None
            if self.fair_sharing is None or self.fair_sharing.weight is None
            else float(self.fair_sharing.weight),
            per_user=None
            if self.limits is None
            else self.limits.to_per_user(self.name, f"{path}.limits", problems),
            max_runtime=None if self.max_runtime is None else parse_duration(self.max_runtime),
            max_runtime_action=None
            if self.max_runtime_action is None
            else MaxRuntimeAction(self.max_runtime_action),
        )


def quota_node_name(raw: Mapping[str, Any], loc: Sequence[int | str]) -> str | None:
    """The name of the quota tree node that error location ``loc`` lies in, if it has one.

    ``raw`` is the ElasticQuotaTree document as read; ``loc`` a pydantic error
    location such as ``("spec", "root", "children", 0, "min", "cpu")``.
    """
    if tuple(loc[:2]) != ("spec", "root"):
        return None
    spec = raw.get("spec")
    node = spec.get("root") if isinstance(spec, Mapping) else None
    rest = loc[2:]
    while len(rest) >= 2 and rest[0] == "children" and isinstance(rest[1], int):
        children = node.get("children") if isinstance(node, Mapping) else None
        if not isinstance(children, list) or not 0 <= rest[1] < len(children):
            return None
        node, rest = children[rest[1]], rest[2:]
    name = node.get("name") if isinstance(node, Mapping) else None
    return name if isinstance(name, str) else None


class ElasticQuotaTreeSpec(_Owned):
    root: QuotaNodeModel


class QuotaShortfall(_Foreign):
    """One resource the tree promises beyond what the members hold (quantities)."""

    resource: StrictStr
    promised: StrictStr
    held: StrictStr
    short: StrictStr


class RootCapacity(_Foreign):
    """The root's figures in force (with ``capacity: auto``, the members' capacity)."""

    min: dict[str, StrictStr] = Field(default_factory=dict)
    max: dict[str, StrictStr] | None = None


class ElasticQuotaTreeStatus(_Foreign):
    """What Fleet observes of the tree in force: written by Fleet, ignored when a tree
    is written (as Kubernetes ignores ``status`` in a change of ``spec``)."""

    #: the root's ``capacity`` as written (``auto``), or absent
    capacity: StrictStr | None = None
    root: RootCapacity | None = None
    #: the members' healthy capacity per resource (the clusters in service, bad nodes left out)
    held: dict[str, StrictStr] = Field(default_factory=dict)
    #: what the tree guarantees beyond ``held``; empty when it promises no more than exists
    overpromised: list[QuotaShortfall] = Field(default_factory=list)


class ElasticQuotaTreeModel(_Owned):
    api_version: Literal["scheduling.sigs.k8s.io/v1beta1"]
    kind: Literal["ElasticQuotaTree"]
    metadata: ObjectMeta
    spec: ElasticQuotaTreeSpec
    #: Fleet's report on the tree in force (``GET /api/v1/quota-tree``); ignored on input.
    status: ElasticQuotaTreeStatus | None = None

    def to_spec(self) -> tuple[QuotaNodeSpec, list[Problem]]:
        problems: list[Problem] = []
        root = self.spec.root.to_spec("spec.root", problems, root=True)
        return root, problems

    def problems(self) -> list[Problem]:
        return self.to_spec()[1]


# Label selectors (Kubernetes semantics) -------------------------------------------


class LabelSelectorRequirement(_Owned):
    key: Annotated[StrictStr, Field(min_length=1)]
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[StrictStr] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs a non-empty values list")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels


class LabelSelector(_Owned):
    """``matchLabels`` AND every ``matchExpressions``; an empty selector matches all."""

    match_labels: dict[str, StrictStr] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels.items()) and all(
            e.matches(labels) for e in self.match_expressions
        )


# PropagationPolicy (ACK One and Karmada) -------------------------------------------


class ResourceSelector(_Owned):
    api_version: Annotated[StrictStr, Field(min_length=1)]
    kind: Annotated[StrictStr, Field(min_length=1)]
    namespace: NamespaceName | None = None
    name: Name | None = None
    label_selector: LabelSelector | None = None


class ClusterAffinity(_Owned):
    cluster_names: list[Name] = Field(default_factory=list)
    exclude: list[Name] = Field(default_factory=list)
    label_selector: LabelSelector | None = None


class ReplicaScheduling(_Owned):
    replica_scheduling_type: Literal["Divided", "Duplicated"] = "Duplicated"
    replica_division_preference: Literal["Aggregated", "Weighted"] | None = None
    weight_preference: dict[str, Any] | None = None
    custom_scheduling_type: Literal["Gang"] | None = None


class Placement(_Owned):
    cluster_affinity: ClusterAffinity | None = None
    replica_scheduling: ReplicaScheduling | None = None


_OLD_PURGE_MODES: Final = {"Immediately": "Directly", "Graciously": "Gracefully"}


def _purge_mode(value: object) -> object:
    if isinstance(value, str):
        return _OLD_PURGE_MODES.get(value, value)
    return value


PurgeMode = Annotated[Literal["Directly", "Gracefully", "Never"], BeforeValidator(_purge_mode)]


class DecisionConditions(_Owned):
    toleration_seconds: Annotated[StrictInt, Field(ge=0)] = 300


class ApplicationFailover(_Owned):
    decision_conditions: DecisionConditions = Field(default_factory=DecisionConditions)
    purge_mode: PurgeMode = "Gracefully"
    grace_period_seconds: Count | None = None
    state_preservation: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _grace_needs_graceful(self) -> ApplicationFailover:
        if self.grace_period_seconds is not None and self.purge_mode != "Gracefully":
            raise ValueError("gracePeriodSeconds only applies with purgeMode Gracefully")
        return self


class Failover(_Owned):
    application: ApplicationFailover | None = None


class Suspension(_Owned):
    scheduling: StrictBool = False  # ACK One: hold the job in the queue
    dispatching: StrictBool = False  # Karmada: do not create it in member clusters
    dispatching_on_clusters: dict[str, Any] | None = None


class PropagationPolicySpec(_Owned):
    resource_selectors: Annotated[list[ResourceSelector], Field(min_length=1)]
    propagate_deps: StrictBool = False
    placement: Placement = Field(default_factory=Placement)
    priority: StrictInt = 0
    preemption: Literal["Always", "Never"] = "Never"
    conflict_resolution: Literal["Abort", "Overwrite"] = "Abort"
    scheduler_name: StrictStr | None = None
    failover: Failover | None = None
    suspension: Suspension | None = None
    activation_preference: Literal["Lazy"] | None = None
    preserve_resources_on_deletion: StrictBool | None = None
    dependent_overrides: list[StrictStr] = Field(default_factory=list)


class PropagationPolicyModel(Namespaced, _Owned):
    api_version: Literal["policy.one.alibabacloud.com/v1alpha1", "policy.karmada.io/v1alpha1"]
    kind: Literal["PropagationPolicy"]
    metadata: ObjectMeta
    spec: PropagationPolicySpec

    @property
    def gang(self) -> bool:
        rs = self.spec.placement.replica_scheduling
        return rs is not None and rs.custom_scheduling_type == "Gang"

    @property
    def application_failover(self) -> ApplicationFailover:
        """The failover rule in force (defaults: 300 s, Gracefully)."""
        fo = self.spec.failover
        return fo.application if fo and fo.application else ApplicationFailover()

    def problems(self) -> list[Problem]:
        return []


# MemberCluster ------------------------------------------------------------------------


class KubeconfigRef(_Owned):
    path: Annotated[StrictStr, Field(min_length=1)]
    context: StrictStr | None = None


class KindRef(_Owned):
    """One workload kind a member runs, as a document names it."""

    api_version: Annotated[StrictStr, Field(min_length=1)]
    kind: Annotated[StrictStr, Field(min_length=1)]


#: The kind a real member runs when its MemberCluster lists none.
DEFAULT_MEMBER_KIND: Final = ("kubeflow.org/v1", "PyTorchJob")


class NodeModel(_Owned):
    """One node of a member: a simulated member's ``spec.nodes``, a real one's ``status.nodes``."""

    name: Annotated[StrictStr, Field(min_length=1, max_length=253)]
    labels: dict[str, StrictStr] = Field(default_factory=dict)
    #: ``nvidia.com/gpu`` (or ``gpu.fleet.io/<product>`` per product), ``cpu``, ``memory``
    capacity: QuantityMap = Field(default_factory=dict)


class TopologyModel(_Owned):
    """How to read a member's cells from its Nodes (:mod:`fleet.manifests.topology`)."""

    #: label keys of the levels above the node, widest first
    levels: list[Annotated[StrictStr, Field(min_length=1)]] = Field(default_factory=list)
    #: label whose value is the number of GPUs in each NVLink/NUMA group of a node
    gpu_group: Annotated[StrictStr, Field(min_length=1)] | None = None
    #: the nodes that count; none: every node with GPUs
    node_selector: LabelSelector | None = None


class VCRequestModel(_Owned):
    """What a virtual cluster is owed, in the member's own terms."""

    nodes: Count | None = None
    gpus: Count | None = None
    node_selector: LabelSelector | None = None
    #: a level label key: the request is one cell of that level
    within: Annotated[StrictStr, Field(min_length=1)] | None = None

    @model_validator(mode="after")
    def _one_amount(self) -> VCRequestModel:
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("set exactly one of `nodes` and `gpus`")
        return self


class VCRequestsModel(_Owned):
    requests: list[VCRequestModel] = Field(default_factory=list)


class MemberClusterSpec(_Owned):
    simulated: StrictBool = False
    kubeconfig: KubeconfigRef | None = None
    #: a hand-written HiveD cell config; wins over ``topology`` and
    #: ``virtualClusters`` where it gives ``physicalCluster`` / ``virtualClusters``
    cells: dict[str, Any] | None = None
    topology: TopologyModel | None = None
    #: a simulated member's nodes (a real member's come from its Node objects)
    nodes: list[NodeModel] | None = None
    virtual_clusters: dict[str, VCRequestsModel] | None = None
    #: The workload kinds the member runs (their CRDs and controllers are
    #: installed there).  None: every kind on a simulated member, PyTorchJob
    #: alone on a real one.
    kinds: list[KindRef] | None = None

    @field_validator("cells", "topology", "nodes", "virtual_clusters", mode="before")
    @classmethod
    def _not_null(cls, value: object) -> object:
        if value is None:  # absent is fine, an explicit null is a mistake
            raise ValueError("expected a mapping (key: value), not null")
        return value

    @model_validator(mode="after")
    def _one_backend(self) -> MemberClusterSpec:
        if self.simulated == (self.kubeconfig is not None):
            raise ValueError("set exactly one of `simulated: true` and `kubeconfig`")
        if self.nodes is not None and not self.simulated:
            raise ValueError(
                "`nodes` lists a simulated member's nodes; a real member's come from its "
                "Node objects (describe them with `topology`)"
            )
        if self.cells is None and self.topology is None and self.nodes is None:
            raise ValueError(
                "set `cells` (a HiveD cell config) or `topology` (cells from Node labels)"
            )
        return self

    @property
    def built(self) -> bool:
        """Whether the physical cells are built from nodes (not hand-written)."""
        given = self.topology is not None or self.nodes is not None
        return given and (self.cells is None or "physicalCluster" not in self.cells)


class MemberClusterStatus(_Owned):
    """What Fleet observed of a real member: its Nodes, as the topology reads them."""

    nodes: list[NodeModel] = Field(default_factory=list)


class MemberClusterModel(_Owned):
    api_version: Literal["fleet.io/v1alpha1"]
    kind: Literal["MemberCluster"]
    metadata: ObjectMeta
    spec: MemberClusterSpec
    status: MemberClusterStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def labels(self) -> Mapping[str, str]:
        return self.metadata.labels

    #: The loaded cell config, kept after the first call (the model is frozen).
    _cell_config: CellConfig | None = PrivateAttr(default=None)
    _shortfalls: list[topology.Unmet] = PrivateAttr(default_factory=list)

    def cell_config(self) -> CellConfig:
        """The validated HiveD cell config (raises CellConfigError if invalid).

        Loaded once per model: every submission asks for it (GPU types,
        capacity), and building a large cluster's topology is not cheap.  A
        member described by its topology builds it from its nodes
        (:mod:`fleet.manifests.topology`): a simulated member's own list, where
        every problem is an error; a real member's observed Nodes, where a
        virtual cluster holds what it can (:meth:`shortfalls`).
        """
        if self._cell_config is None:
            if not self.spec.built and not self.spec.virtual_clusters:
                assert self.spec.cells is not None
                self._cell_config = _cells.load(self.spec.cells)
            else:
                config, short = topology.cell_config(
                    self.topology_spec(),
                    self.topology_nodes([]),
                    self.vc_requests(),
                    cells=self.spec.cells,
                    strict=self.spec.simulated,
                )
                self._cell_config, self._shortfalls = config, short
        return self._cell_config

    def shortfalls(self) -> list[topology.Unmet]:
        """The virtual cluster requests the member's nodes cannot hold now."""
        self.cell_config()
        return list(self._shortfalls)

    def topology_spec(self) -> topology.Topology:
        spec = self.spec.topology
        if spec is None:
            return topology.Topology()
        selector = spec.node_selector
        return topology.Topology(
            tuple(spec.levels), spec.gpu_group, selector.matches if selector is not None else None
        )

    def topology_nodes(self, problems: list[Problem]) -> list[topology.Node]:
        """The nodes the topology reads: ``spec.nodes``, or the observed ``status.nodes``."""
        if self.spec.nodes is not None:
            given, where = self.spec.nodes, "spec.nodes"
        else:
            given, where = (self.status.nodes if self.status else []), "status.nodes"
        out: list[topology.Node] = []
        seen: set[str] = set()
        for i, node in enumerate(given):
            path = f"{where}[{i}]"
            if node.name in seen:
                problems.append((f"{path}.name", f"duplicate node {quote(node.name)}"))
                continue
            seen.add(node.name)
            for key, value in node.labels.items():
                wrong = label_problem(key, value)
                if wrong is not None:
                    problems.append((f"{path}.labels.{key}", wrong))
            capacity, bad = parse_resources(node.capacity, f"{path}.capacity")
            problems.extend(bad)
            out.append(topology.Node(node.name, dict(node.labels), capacity, path))
        return out

    def vc_requests(self) -> dict[str, list[topology.Request]]:
        out: dict[str, list[topology.Request]] = {}
        for vc, asked in (self.spec.virtual_clusters or {}).items():
            out[vc] = [
                topology.Request(
                    r.nodes,
                    r.gpus,
                    r.node_selector.matches if r.node_selector is not None else None,
                    r.within,
                    f"spec.virtualClusters.{vc}.requests[{i}]",
                )
                for i, r in enumerate(asked.requests)
            ]
        return out

    def runs(self, api_version: str, kind: str) -> bool:
        """Whether the member runs jobs of this kind (:attr:`MemberClusterSpec.kinds`)."""
        listed = self.spec.kinds
        if listed is None:
            return self.spec.simulated or (api_version, kind) == DEFAULT_MEMBER_KIND
        return any(k.api_version == api_version and k.kind == kind for k in listed)

    def problems(self) -> list[Problem]:
        if not self.spec.built and not self.spec.virtual_clusters:
            assert self.spec.cells is not None
            return _cells.problems(self.spec.cells)
        problems: list[Problem] = []
        nodes = self.topology_nodes(problems)
        gpus = sum(n.capacity.get(resources.GPU, 0) for n in nodes)
        if gpus > _cells.MAX_LEAF_CELLS:
            limit = f"{_cells.MAX_LEAF_CELLS:_}"
            problems.append(
                ("spec.nodes", f"{gpus} GPUs; a member cluster may have at most {limit}")
            )
        levels = self.spec.topology.levels if self.spec.topology else []
        for vc, asked in (self.spec.virtual_clusters or {}).items():
            for i, r in enumerate(asked.requests):
                if r.within is not None and r.within not in levels:
                    problems.append(
                        (
                            f"spec.virtualClusters.{vc}.requests[{i}].within",
                            f"{quote(r.within)} is not a level of spec.topology.levels "
                            f"({', '.join(levels) or 'none'})",
                        )
                    )
        if self.spec.cells is not None:
            problems.extend(_cells.size_problems(self.spec.cells))
        if problems:
            return problems
        try:
            self.cell_config()
        except CellConfigError as e:
            return [(e.path, e.message)]
        return []
