"""Pydantic models of the objects Fleet reads: quota tree, policy, job, member cluster.

Theory of operation: a model checks the *shape* of one document (types,
enums, ranges, required fields) and pydantic reports each problem with its
location, which :mod:`fleet.manifests.documents` turns into a dotted field path.
Checks that need more than one field, or that must name a map key in the
path (quantities, GPU SKU, annotations, cell configs), live in each top-level
model's ``problems()``, which returns ``(path, message)`` pairs and never
raises.  Nothing here needs the quota tree or the member clusters: those
checks are in :mod:`fleet.manifests.convert`.  Only Fleet places pods: a
PyTorchJob whose pod template names its node or scheduler, or that carries a
label or annotation Fleet writes itself (:data:`FLEET_WRITTEN_KEYS`), is
refused at that field (:func:`_placement_problems`).

Fleet owns the schema of ``ElasticQuotaTree``, ``PropagationPolicy`` and
``MemberCluster``: unknown fields are rejected (``extra="forbid"``) so a typo
never passes silently.  ``PyTorchJob`` belongs to Kubeflow: unknown fields are
kept (``extra="allow"``) and only what Fleet reads is validated.  Object
``metadata`` is Kubernetes' and is tolerant everywhere.  Field names are the
Kubernetes camelCase spellings (aliases); quantities stay as written until
:func:`parse_resources` turns them into exact :class:`Resources`.  Every name
and namespace is checked by the one rule of :mod:`fleet.manifests.names`,
which matches the whole text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)
from pydantic.alias_generators import to_camel

from fleet.core import resources
from fleet.core.cells.spec import CellConfig
from fleet.core.quota import QuotaNodeSpec
from fleet.core.quota_rules import node_message
from fleet.core.resources import QuantityError, Resources
from fleet.manifests import _cells
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
#: The labels and annotations Fleet itself writes on the PyTorchJobs it creates in a
#: member and on their pods (:mod:`fleet.clusters.kube.objects`, the pod binder), and
#: reads back: a submission that carries one is refused (:func:`_placement_problems`).
FLEET_WRITTEN_KEYS: Final = frozenset(
    {
        "fleet.io/job-uid",
        "fleet.io/queue",
        "fleet.io/cluster",
        "fleet.io/job",
        "fleet.io/placement",
        "fleet.io/gpu-indices",
        "fleet.io/replica",
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
PYTORCH_API: Final = "kubeflow.org/v1"
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


class QuotaNodeModel(_Owned):
    name: Name
    min: QuantityMap | None = None
    max: QuantityMap | None = None
    namespaces: list[NamespaceName] = Field(default_factory=list)
    children: list[QuotaNodeModel] = Field(default_factory=list)
    #: Fleet's own fields (durations such as ``10m``), inherited by children unless set.
    preempt_min_runtime: Duration | None = None
    reclaim_min_runtime: Duration | None = None

    def to_spec(self, path: str, problems: list[Problem]) -> QuotaNodeSpec:
        """The exact core node (``path`` names it); quantity problems, naming it, are appended."""
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


class ElasticQuotaTreeModel(_Owned):
    api_version: Literal["scheduling.sigs.k8s.io/v1beta1"]
    kind: Literal["ElasticQuotaTree"]
    metadata: ObjectMeta
    spec: ElasticQuotaTreeSpec

    def to_spec(self) -> tuple[QuotaNodeSpec, list[Problem]]:
        problems: list[Problem] = []
        root = self.spec.root.to_spec("spec.root", problems)
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


class PropagationPolicyModel(_Owned):
    api_version: Literal["policy.one.alibabacloud.com/v1alpha1", "policy.karmada.io/v1alpha1"]
    kind: Literal["PropagationPolicy"]
    metadata: ObjectMeta
    spec: PropagationPolicySpec

    @property
    def namespace(self) -> str:
        return self.metadata.namespace_or_default

    @property
    def key(self) -> str:
        return self.metadata.key

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


# PyTorchJob (Kubeflow; tolerant) ----------------------------------------------------


class ResourceRequirements(_Foreign):
    requests: QuantityMap = Field(default_factory=dict)
    limits: QuantityMap = Field(default_factory=dict)


class Container(_Foreign):
    name: StrictStr | None = None
    resources: ResourceRequirements = Field(default_factory=ResourceRequirements)


class PodSpec(_Foreign):
    containers: Annotated[list[Container], Field(min_length=1)]
    init_containers: list[Container] = Field(default_factory=list)
    node_selector: dict[str, StrictStr] = Field(default_factory=dict)


class PodTemplate(_Foreign):
    spec: PodSpec


class ReplicaSpec(_Foreign):
    replicas: ReplicaCount = 1
    template: PodTemplate


class PyTorchReplicaSpecs(_Foreign):
    master: ReplicaSpec | None = Field(default=None, alias="Master")
    worker: ReplicaSpec | None = Field(default=None, alias="Worker")


class SchedulingPolicy(_Foreign):
    queue: StrictStr | None = None
    priority_class: StrictStr | None = None
    min_available: ReplicaCount | None = None


class RunPolicy(_Foreign):
    scheduling_policy: SchedulingPolicy | None = None


class ElasticPolicy(_Foreign):
    min_replicas: ReplicaCount | None = None
    max_replicas: ReplicaCount | None = None


class PyTorchJobSpec(_Foreign):
    pytorch_replica_specs: PyTorchReplicaSpecs
    run_policy: RunPolicy | None = None
    elastic_policy: ElasticPolicy | None = None


def _container_request(c: Container, path: str, problems: list[Problem]) -> Resources:
    """Requests, falling back to limits per resource (as Kubernetes defaults them)."""
    req, p1 = parse_resources(c.resources.requests, f"{path}.resources.requests")
    lim, p2 = parse_resources(c.resources.limits, f"{path}.resources.limits")
    problems.extend(p1 + p2)
    merged = dict(lim)
    merged.update(req)
    for name, amount in req.items():
        if name in c.resources.limits and amount > lim[name]:
            problems.append(
                (f"{path}.resources.requests.{name}", "request must not exceed the limit")
            )
        elif name == resources.GPU and name in c.resources.limits and amount != lim[name]:
            problems.append(
                (f"{path}.resources.requests.{name}", "request must equal the limit for GPUs")
            )
    return Resources(merged)


class PyTorchJobModel(_Foreign):
    api_version: Literal["kubeflow.org/v1"]
    kind: Literal["PyTorchJob"]
    metadata: ObjectMeta
    spec: PyTorchJobSpec

    @property
    def namespace(self) -> str:
        return self.metadata.namespace_or_default

    @property
    def key(self) -> str:
        return self.metadata.key

    @property
    def scheduling_policy(self) -> SchedulingPolicy:
        rp = self.spec.run_policy
        return rp.scheduling_policy if rp and rp.scheduling_policy else SchedulingPolicy()

    def replica_groups(self) -> list[tuple[str, ReplicaSpec]]:
        """``(role, spec)`` in placement order: Master first, then Worker."""
        specs = self.spec.pytorch_replica_specs
        out: list[tuple[str, ReplicaSpec]] = []
        if specs.master is not None:
            out.append(("Master", specs.master))
        if specs.worker is not None:
            out.append(("Worker", specs.worker))
        return out

    def per_pod(self, role: str, spec: ReplicaSpec, problems: list[Problem]) -> Resources:
        """One pod's request: sum over containers, at least the largest init container."""
        path = f"spec.pytorchReplicaSpecs.{role}.template.spec"
        total = resources.ZERO
        for i, c in enumerate(spec.template.spec.containers):
            total = total + _container_request(c, f"{path}.containers[{i}]", problems)
        for i, c in enumerate(spec.template.spec.init_containers):
            init = _container_request(c, f"{path}.initContainers[{i}]", problems)
            total = Resources({k: max(total[k], init[k]) for k in set(total) | set(init)})
        return total

    def _sku_sources(self) -> list[tuple[str, str]]:
        """``(field path, SKU)`` of every place that names the GPU type."""
        sources: list[tuple[str, str]] = []
        annotated = self.metadata.annotations.get(GPU_TYPE_ANNOTATION)
        if annotated is not None:
            sources.append((f"metadata.annotations.{GPU_TYPE_ANNOTATION}", annotated))
        for role, spec in self.replica_groups():
            sku = spec.template.spec.node_selector.get(GPU_PRODUCT_LABEL)
            if sku is not None:
                path = f"spec.pytorchReplicaSpecs.{role}.template.spec.nodeSelector"
                sources.append((f"{path}.{GPU_PRODUCT_LABEL}", sku))
        return sources

    def gpu_sku_path(self) -> str | None:
        """The field path of the (first) place that names the GPU type, if any."""
        sources = self._sku_sources()
        return sources[0][0] if sources else None

    def gpu_sku(self, problems: list[Problem]) -> str | None:
        """The SKU named by the annotation and/or the templates; they must agree."""
        sources = self._sku_sources()
        if not sources:
            return None
        first_path, first = sources[0]
        for path, sku in sources[1:]:
            if sku != first:
                msg = f"GPU type {quote(sku)} differs from {quote(first)} given at {first_path}"
                problems.append((path, msg))
        if not first:
            problems.append((first_path, "GPU type must not be empty"))
        return first

    @property
    def simulated_duration(self) -> float | None:
        """Seconds the simulated backend runs this job, if the annotation says."""
        text = self.metadata.annotations.get(SIM_DURATION_ANNOTATION)
        return None if text is None else parse_duration(text)

    @property
    def simulated_outcome(self) -> str | None:
        return self.metadata.annotations.get(SIM_OUTCOME_ANNOTATION)

    def problems(self) -> list[Problem]:
        problems: list[Problem] = []
        specs = self.spec.pytorch_replica_specs
        for extra in sorted(specs.model_extra or {}):
            problems.append(
                (
                    f"spec.pytorchReplicaSpecs.{extra}",
                    f"replica type {quote(extra)} is not supported; Fleet runs Master and Worker",
                )
            )
        groups = self.replica_groups()
        if not groups:
            problems.append(("spec.pytorchReplicaSpecs", "needs a Master or a Worker replica spec"))
        if specs.master is not None and specs.master.replicas != 1:
            problems.append(
                ("spec.pytorchReplicaSpecs.Master.replicas", "a PyTorchJob has exactly 1 Master")
            )
        for role, spec in groups:
            self.per_pod(role, spec, problems)
        self.gpu_sku(problems)
        total = sum(spec.replicas for _, spec in groups)
        sp = self.scheduling_policy
        if sp.min_available is not None and groups and sp.min_available > total:
            problems.append(
                (
                    "spec.runPolicy.schedulingPolicy.minAvailable",
                    f"{sp.min_available} is more than the job's {total} replicas",
                )
            )
        problems.extend(self._elastic_problems())
        problems.extend(self._annotation_problems())
        problems.extend(_placement_problems(self))
        return problems

    def _elastic_problems(self) -> list[Problem]:
        ep = self.spec.elastic_policy
        if ep is None:
            return []
        worker = self.spec.pytorch_replica_specs.worker
        if worker is None:
            return [("spec.elasticPolicy", "an elastic job needs a Worker replica spec")]
        out: list[Problem] = []
        lo, hi = ep.min_replicas, ep.max_replicas
        if lo is not None and hi is not None and lo > hi:
            return [("spec.elasticPolicy.minReplicas", f"{lo} is more than maxReplicas {hi}")]
        if lo is not None and worker.replicas < lo:
            out.append(
                (
                    "spec.pytorchReplicaSpecs.Worker.replicas",
                    f"{worker.replicas} is below elasticPolicy.minReplicas {lo}",
                )
            )
        if hi is not None and worker.replicas > hi:
            out.append(
                (
                    "spec.pytorchReplicaSpecs.Worker.replicas",
                    f"{worker.replicas} is above elasticPolicy.maxReplicas {hi}",
                )
            )
        return out

    def _annotation_problems(self) -> list[Problem]:
        out: list[Problem] = []
        ann = self.metadata.annotations
        base = "metadata.annotations"
        pre = ann.get(PREEMPTIBLE_ANNOTATION)
        if pre is not None and pre not in ("true", "false"):
            out.append(
                (f"{base}.{PREEMPTIBLE_ANNOTATION}", f'must be "true" or "false", not {quote(pre)}')
            )
        dur = ann.get(SIM_DURATION_ANNOTATION)
        if dur is not None:
            try:
                if parse_duration(dur) <= 0:
                    out.append((f"{base}.{SIM_DURATION_ANNOTATION}", "must be positive"))
            except ValueError as e:
                out.append((f"{base}.{SIM_DURATION_ANNOTATION}", str(e)))
        outcome = ann.get(SIM_OUTCOME_ANNOTATION)
        if outcome is not None and outcome not in SIM_OUTCOMES:
            out.append(
                (
                    f"{base}.{SIM_OUTCOME_ANNOTATION}",
                    f"must be Succeeded or Failed, not {quote(outcome)}",
                )
            )
        return out


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _written_key_problems(metadata: Mapping[str, Any], path: str) -> list[Problem]:
    """The labels and annotations under ``metadata`` (at ``path``) that Fleet writes itself."""
    out: list[Problem] = []
    for field in ("labels", "annotations"):
        for key in _mapping(metadata.get(field)):
            if key in FLEET_WRITTEN_KEYS:
                out.append(
                    (
                        f"{path}.{field}.{key}",
                        f"{quote(key)} is written by Fleet itself on what it creates; remove it",
                    )
                )
    return out


def _placement_problems(job: PyTorchJobModel) -> list[Problem]:
    """What would let a submission place its own pods or pass for Fleet's own writing.

    Only Fleet places pods: a pod template may not name its node (``nodeName``
    skips every scheduler) or its scheduler (``schedulerName``: Fleet names
    its own), and neither the job nor a pod template may carry a label or
    annotation of :data:`FLEET_WRITTEN_KEYS`.  The ``fleet.io/`` annotations
    users give (GPU type, preemptible, pinned cell, durations) stay allowed, and
    so do ``nodeSelector`` and ``affinity``: they are constraints, not a
    placement (Fleet adds its planned node to the affinity, and the kubelet
    refuses a pod whose node does not meet them); ``nvidia.com/gpu.product``
    in ``nodeSelector`` is how a job names its GPU type.
    """
    meta = job.metadata
    out = _written_key_problems(
        {"labels": meta.labels, "annotations": meta.annotations}, "metadata"
    )
    for role, spec in job.replica_groups():
        base = f"spec.pytorchReplicaSpecs.{role}.template"
        template_meta = _mapping((spec.template.model_extra or {}).get("metadata"))
        out.extend(_written_key_problems(template_meta, f"{base}.metadata"))
        pod = spec.template.spec.model_extra or {}
        for field, message in FLEET_PLACES.items():
            if pod.get(field) not in (None, ""):
                out.append((f"{base}.spec.{field}", message))
    return out


# MemberCluster ------------------------------------------------------------------------


class KubeconfigRef(_Owned):
    path: Annotated[StrictStr, Field(min_length=1)]
    context: StrictStr | None = None


class MemberClusterSpec(_Owned):
    simulated: StrictBool = False
    kubeconfig: KubeconfigRef | None = None
    cells: dict[str, Any]

    @model_validator(mode="after")
    def _one_backend(self) -> MemberClusterSpec:
        if self.simulated == (self.kubeconfig is not None):
            raise ValueError("set exactly one of `simulated: true` and `kubeconfig`")
        return self


class MemberClusterModel(_Owned):
    api_version: Literal["fleet.io/v1alpha1"]
    kind: Literal["MemberCluster"]
    metadata: ObjectMeta
    spec: MemberClusterSpec

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def labels(self) -> Mapping[str, str]:
        return self.metadata.labels

    #: The loaded cell config, kept after the first call (the model is frozen).
    _cell_config: CellConfig | None = PrivateAttr(default=None)

    def cell_config(self) -> CellConfig:
        """The validated HiveD cell config (raises CellConfigError if invalid).

        Loaded once per model: every submission asks for it (GPU types,
        capacity), and building a large cluster's topology is not cheap.
        """
        if self._cell_config is None:
            self._cell_config = _cells.load(self.spec.cells)
        return self._cell_config

    def problems(self) -> list[Problem]:
        return _cells.problems(self.spec.cells)
