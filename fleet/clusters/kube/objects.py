"""The Kubernetes objects Fleet writes and reads, as plain JSON data.

Theory of operation: pure functions, no I/O.  :func:`member_object` turns a
:class:`~fleet.clusters.base.DispatchedJob` into the object of its kind
(:mod:`fleet.manifests.kinds`) created in the member: the deterministic name
(:func:`~fleet.clusters.base.member_object_name`), Fleet's labels (job uid,
queue, cluster) and annotations (the job's key and its placement), and pod
templates that name Fleet as their scheduler, carry the job's uid label, and
may only run on the nodes planned for their replica type (node affinity on
``metadata.name``: every term the user gave, once per planned node); the
kind writes each role's pod count and where its templates are.  A kind may
need other objects in the member first (a TrainJob its runtime):
:func:`member_objects` returns them with the object, which then refers to
them (:meth:`~fleet.manifests.kinds.base.Kind.dependencies`).  The other
functions read what the member says: an object's phase (its kind reads it), a
Node's health and what its topology reads of it (:func:`observed_node`), and
the Binding and Event objects the pod binder posts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from fleet.clusters.base import DispatchedJob, ObservedNode
from fleet.core import resources
from fleet.core.digits import parse_digits
from fleet.core.placement import PodPlacement
from fleet.manifests import models
from fleet.manifests.kinds import registry
from fleet.manifests.kinds.base import Dependency, Phase

#: The pods' ``schedulerName``: Fleet binds the pods that name it.
SCHEDULER_NAME: Final = "fleet-scheduler"

#: Every ``fleet.io/`` key below is Fleet's alone: a submission carrying one is refused
#: (``fleet.manifests.models.FLEET_WRITTEN_KEYS``; a test keeps the two lists equal).
UID_LABEL: Final = "fleet.io/job-uid"
QUEUE_LABEL: Final = "fleet.io/queue"
CLUSTER_LABEL: Final = "fleet.io/cluster"
KEY_ANNOTATION: Final = "fleet.io/job"
PLACEMENT_ANNOTATION: Final = "fleet.io/placement"
#: On a bound pod: its GPU (leaf cell) indices on the node, comma-separated
#: (HiveD's leaf-cell isolation: a device plugin exposes exactly these).
GPU_ANNOTATION: Final = "fleet.io/gpu-indices"
#: On a bound pod: which planned replica it is (``Worker-1``).
REPLICA_ANNOTATION: Final = "fleet.io/replica"
#: On a JobSet's pod templates: the pods one of its Jobs runs at once (its kind writes it).
PODS_PER_JOB_ANNOTATION: Final = models.PODS_PER_JOB_ANNOTATION
#: On a stored TrainJob: its effective runtime (the member's runtime is made from it).
TRAINING_RUNTIME_ANNOTATION: Final = models.TRAINING_RUNTIME_ANNOTATION

_LABEL_VALUE_MAX: Final = 63
_SERVER_FIELDS: Final = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "ownerReferences",
    "finalizers",
)

JSON = dict[str, Any]


def _label_value(text: str) -> str | None:
    """``text`` if it is a valid label value, else None."""
    if len(text) > _LABEL_VALUE_MAX:
        return None
    ok = all(c.isascii() and (c.isalnum() or c in "-_.") for c in text)
    if not ok or (text and not (text[0].isalnum() and text[-1].isalnum())):
        return None
    return text


def placement_text(pods: Sequence[PodPlacement]) -> str:
    """The placement annotation: JSON ``[{"pod", "node", "gpus"}, ...]`` in pod order."""
    return json.dumps(
        [{"pod": p.pod, "node": p.node, "gpus": list(p.gpus)} for p in pods],
        separators=(",", ":"),
    )


def member_object(job: DispatchedJob, scheduler: str = SCHEDULER_NAME) -> JSON:
    """The object of ``job``'s kind in its member; see the module docstring."""
    return member_objects(job, scheduler)[0]


def member_objects(
    job: DispatchedJob, scheduler: str = SCHEDULER_NAME
) -> tuple[JSON, list[Dependency]]:
    """:func:`member_object` and the objects it needs in the member first (its kind's)."""
    kind = registry.of(job.manifest)
    manifest: JSON = copy.deepcopy(dict(job.manifest))
    metadata = dict(manifest.get("metadata") or {})
    for name in _SERVER_FIELDS:
        metadata.pop(name, None)
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    labels[UID_LABEL] = job.uid
    labels[CLUSTER_LABEL] = _label_value(job.cluster) or ""
    queue = _label_value(job.queue)
    if queue is not None:
        labels[QUEUE_LABEL] = queue
    annotations = {str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()}
    annotations[KEY_ANNOTATION] = job.key
    annotations[PLACEMENT_ANNOTATION] = placement_text(job.pods)
    metadata.update(
        name=job.object_name,
        namespace=job.namespace,
        labels={k: v for k, v in labels.items() if v},
        annotations=annotations,
    )
    by_role: dict[str, list[PodPlacement]] = {}
    for pod in job.pods:
        by_role.setdefault(pod.pod.rsplit("-", 1)[0], []).append(pod)

    def decorate(role: str, template: Mapping[str, Any]) -> JSON:
        nodes = sorted({p.node for p in by_role.get(role, [])})
        return _template(template, job.uid, scheduler, nodes)

    counts = {role: len(planned) for role, planned in by_role.items()}
    spec = kind.member_spec(dict(manifest.get("spec") or {}), counts, decorate)
    manifest.update(apiVersion=kind.api_version, kind=kind.kind, metadata=metadata, spec=spec)
    manifest.pop("status", None)
    return kind.dependencies(manifest, decorate)


def _template(template: Mapping[str, Any], uid: str, scheduler: str, nodes: list[str]) -> JSON:
    out = dict(template)
    meta = dict(out.get("metadata") or {})
    meta["labels"] = {**dict(meta.get("labels") or {}), UID_LABEL: uid}
    out["metadata"] = meta
    pod = dict(out.get("spec") or {})
    pod["schedulerName"] = scheduler
    affinity = dict(pod.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    # A node field selector takes one value, and terms are ORed: one term per
    # (user's term, planned node), each the user's term AND that node.
    given = [dict(t) for t in required.get("nodeSelectorTerms") or []] or [{}]
    terms = []
    for term in given:
        for node in nodes:
            ours = {"key": "metadata.name", "operator": "In", "values": [node]}
            terms.append({**term, "matchFields": [*list(term.get("matchFields") or []), ours]})
    required["nodeSelectorTerms"] = terms
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    pod["affinity"] = affinity
    out["spec"] = pod
    return out


# Reading what the member says --------------------------------------------------------


def phase(obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
    """The phase of a member object of any kind Fleet runs, and its message."""
    kind = registry.find(obj.get("apiVersion"), obj.get("kind"))
    return (None, "") if kind is None else kind.phase(obj)


def node_health(node: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a Node can take pods, and why not: Ready and not cordoned."""
    spec = node.get("spec")
    if isinstance(spec, Mapping) and spec.get("unschedulable"):
        return False, "cordoned (unschedulable)"
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            if c.get("status") == "True":
                return True, ""
            return False, f"NotReady ({c.get('reason') or c.get('status')})"
    return False, "NotReady (no Ready condition)"


def observed_node(node: Mapping[str, Any]) -> ObservedNode:
    """What a member's topology reads of a Node: its name, labels, its GPUs from
    ``status.capacity`` (``nvidia.com/gpu`` and ``gpu.fleet.io/<product>``: a GPU
    that a device plugin marks unhealthy leaves allocatable, not the cells; the
    cells keep their indices) and its ``cpu`` and ``memory`` from
    ``status.allocatable`` (the capacity when a Node reports none)."""
    status = node.get("status")
    status = status if isinstance(status, Mapping) else {}
    capacity = status.get("capacity")
    capacity = capacity if isinstance(capacity, Mapping) else {}
    allocatable = status.get("allocatable")
    allocatable = allocatable if isinstance(allocatable, Mapping) else capacity
    amounts: dict[str, str] = {}
    for name, value in sorted(capacity.items()):
        if name == resources.GPU or str(name).startswith(resources.TYPED_GPU_PREFIX):
            amounts[str(name)] = str(value)
    for name in (resources.CPU, resources.MEMORY):
        value = allocatable.get(name, capacity.get(name))
        if value is not None:
            amounts[name] = str(value)
    found = labels(node)
    return ObservedNode(
        str(meta(node).get("name", "")),
        {str(k): str(v) for k, v in sorted(found.items())},
        amounts,
    )


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = meta(obj).get("labels")
    return m if isinstance(m, Mapping) else {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    m = meta(obj).get("annotations")
    return m if isinstance(m, Mapping) else {}


def pending(pod: Mapping[str, Any]) -> bool:
    """Not bound to a node yet and not being deleted."""
    spec = pod.get("spec")
    bound = isinstance(spec, Mapping) and bool(spec.get("nodeName"))
    return not bound and not meta(pod).get("deletionTimestamp")


def node_of(pod: Mapping[str, Any]) -> str:
    """The node a pod is bound to ("" if none)."""
    spec = pod.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return node if isinstance(node, str) else ""


def ended(pod: Mapping[str, Any]) -> bool:
    """Whether a pod's containers have all ended (it no longer holds its devices)."""
    status = pod.get("status")
    return isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed")


def gpu_indices(pod: Mapping[str, Any]) -> list[int]:
    """The GPU (leaf-cell) indices Fleet gave a pod in its annotation (none if malformed)."""
    text = annotations_of(pod).get(GPU_ANNOTATION)
    if not isinstance(text, str) or not text:
        return []
    parts = [parse_digits(p) for p in text.split(",")]
    return [p for p in parts if p is not None] if None not in parts else []


def binding(pod_name: str, node: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def pod_event(pod: Mapping[str, Any], reason: str, message: str, now: str) -> JSON:
    """A Warning Event about ``pod`` from Fleet's scheduler (``now``: RFC 3339)."""
    m = meta(pod)
    name = str(m.get("name", ""))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name[:200]}.", "namespace": m.get("namespace")},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "namespace": m.get("namespace"),
            "uid": m.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": SCHEDULER_NAME},
        "reportingComponent": SCHEDULER_NAME,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
