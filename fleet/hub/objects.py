"""The hub's objects as plain JSON: what Fleet reads from them and what it writes on them.

Theory of operation: pure functions, no I/O, so each rule of the hub's
protocol has one place and a test.

- :data:`JOB_RESOURCES`, :data:`POLICY_RESOURCES`, :data:`TREE_RESOURCE`:
  the hub's resources Fleet watches (every workload kind it runs, both
  PropagationPolicy groups, the ``ElasticQuotaTree``), with their REST paths.
- :func:`job_document`: a hub job as a submission's document: its kind, name,
  namespace, labels and annotations (the hub's own bookkeeping annotations
  dropped) and ``spec``, with the hub object's uid added as the annotation
  :data:`HUB_UID`; Fleet stores it, and the uid keeps a deleted and created
  again object (a new uid) a new job while a relist of the same object is the
  same job.
- :func:`conditions`, :func:`job_status`: a job's status on the hub object:
  Fleet's conditions (``Queued``, ``Admitted``, ``Dispatched``, then
  ``Running``, ``Succeeded``, ``Failed``, ``Preempted``, ``Cancelled`` from
  Fleet's state), then the member's own status (Karmada's aggregation: the
  member's conditions after Fleet's, a type the member has taking the place
  of Fleet's, and its replica statuses, for the one member a gang runs in).
  The last condition is the newest, so a kind's printer column
  ``.status.conditions[-1:].type`` (``kubectl get pytorchjob``'s STATE) shows
  where the job is.  What a kind's CRD schema does not know the hub's API
  server prunes (Volcano's conditions, for one, keep ``status`` and
  ``lastTransitionTime`` only).
- :func:`binding_message`: the ``ScheduleBindingSucceed`` Event's message in
  the walkthrough's form, ``Result: {member:0,[{master 1} {worker 2}]}``.
- :func:`queue_name`, :func:`queue_object`: a ``Queue`` object in namespace
  ``kube-queue`` per quota-tree node, named after the node's path joined by
  ``-`` with a five-character suffix, as Kube Queue names them
  (``root-child-2-v5zxz``); the suffix is a hash of the path, so a restarted
  Fleet finds its objects by name.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleet.manifests import models
from fleet.manifests.kinds import registry

JSON = dict[str, Any]

#: The finalizer Fleet puts on the hub jobs it runs: a deleted object stays
#: until Fleet has cancelled its job.
FINALIZER: Final = "fleet.io/hub"
#: The annotation with the hub object's uid, on the job Fleet stores.
HUB_UID: Final = "fleet.io/hub-uid"
#: The annotation of a hub object Fleet made for a job of its HTTP door: the job's uid.
MIRROR_OF: Final = "fleet.io/job-uid"
#: The namespace of the Queue objects.
QUEUE_NAMESPACE: Final = "kube-queue"
QUEUE_API: Final = "scheduling.x-k8s.io/v1alpha1"
#: The label naming a Queue object's quota-tree node.
QUEUE_NODE_LABEL: Final = "fleet.io/quota-node"
#: The namespace whose ElasticQuotaTree Fleet follows (ACK One's rule).
TREE_NAMESPACE: Final = "kube-system"
#: Annotations the hub's clients keep on objects, not part of a job.
_BOOKKEEPING: Final = ("kubectl.kubernetes.io/last-applied-configuration", "fleet.io/job-uid")


@dataclass(frozen=True, slots=True)
class Resource:
    """One resource of the hub Fleet watches."""

    api_version: str
    kind: str
    plural: str

    @property
    def root(self) -> str:
        group, _, version = self.api_version.rpartition("/")
        return f"/apis/{group}/{version}" if group else f"/api/{version}"

    @property
    def path(self) -> str:
        """Its collection across namespaces."""
        return f"{self.root}/{self.plural}"

    def collection_path(self, namespace: str) -> str:
        return f"{self.root}/namespaces/{namespace}/{self.plural}"

    def object_path(self, namespace: str, name: str) -> str:
        return f"{self.collection_path(namespace)}/{name}"

    @property
    def what(self) -> str:
        return f"{self.plural}.{self.api_version}"


JOB_RESOURCES: Final = tuple(Resource(k.api_version, k.kind, k.plural) for k in registry.KINDS)
#: (apiVersion, kind) -> the resource of a workload kind
RESOURCE_OF: Final = {(r.api_version, r.kind): r for r in JOB_RESOURCES}
POLICY_RESOURCES: Final = (
    Resource(models.KARMADA_POLICY_API, "PropagationPolicy", "propagationpolicies"),
    Resource(models.ACK_POLICY_API, "PropagationPolicy", "propagationpolicies"),
)
TREE_RESOURCE: Final = Resource(models.QUOTA_API, "ElasticQuotaTree", "elasticquotatrees")
QUEUE_RESOURCE: Final = Resource(QUEUE_API, "Queue", "queues")


def key_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    value = obj.get("metadata")
    return value if isinstance(value, Mapping) else {}


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def finalizers(obj: Mapping[str, Any]) -> list[str]:
    value = meta(obj).get("finalizers")
    return [str(f) for f in value] if isinstance(value, list) else []


def finalizer_patch(obj: Mapping[str, Any], present: bool) -> list[JSON]:
    """A JSON patch that adds or removes :data:`FINALIZER`, refused when the
    object's finalizers changed meanwhile (its ``test``)."""
    now = finalizers(obj)
    wanted = [f for f in now if f != FINALIZER] + ([FINALIZER] if present else [])
    if "finalizers" not in meta(obj):
        return [{"op": "add", "path": "/metadata/finalizers", "value": wanted}]
    return [
        {"op": "test", "path": "/metadata/finalizers", "value": now},
        {"op": "replace", "path": "/metadata/finalizers", "value": wanted},
    ]


def job_document(obj: Mapping[str, Any]) -> JSON:
    """The hub job ``obj`` as a submission's document (see the module docstring)."""
    m = meta(obj)
    out_meta: JSON = {"name": m.get("name"), "namespace": m.get("namespace")}
    labels = m.get("labels")
    if isinstance(labels, Mapping) and labels:
        out_meta["labels"] = dict(labels)
    annotations = {
        str(k): v
        for k, v in (m.get("annotations") or {}).items()
        if k not in _BOOKKEEPING and k != HUB_UID
    }
    annotations[HUB_UID] = str(m.get("uid") or "")
    out_meta["annotations"] = annotations
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": out_meta,
        "spec": obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {},
    }


def mirror_object(manifest: Mapping[str, Any], job_uid: str) -> JSON:
    """The hub object that shows a job of the HTTP door (``manifest``, its stored
    document) on the hub: its kind, name, namespace, labels, annotations and spec,
    the job's uid as :data:`MIRROR_OF` and Fleet's finalizer."""
    m = manifest.get("metadata") or {}
    annotations = {str(k): v for k, v in (m.get("annotations") or {}).items()}
    annotations[MIRROR_OF] = job_uid
    out_meta: JSON = {
        "name": m.get("name"),
        "namespace": m.get("namespace"),
        "annotations": annotations,
        "finalizers": [FINALIZER],
    }
    if m.get("labels"):
        out_meta["labels"] = dict(m["labels"])
    return {
        "apiVersion": manifest.get("apiVersion"),
        "kind": manifest.get("kind"),
        "metadata": out_meta,
        "spec": manifest.get("spec") or {},
    }


def mirror_of(obj: Mapping[str, Any]) -> str:
    """The uid of the HTTP-door job a hub object shows ("" when it is a user's object)."""
    annotations = meta(obj).get("annotations") or {}
    return str(annotations.get(MIRROR_OF) or "") if isinstance(annotations, Mapping) else ""


def stands_for(obj: Mapping[str, Any], run_uid: str, manifest: Mapping[str, Any]) -> bool:
    """Whether the hub object ``obj`` stands for the job run ``run_uid`` (whose stored
    document is ``manifest``): the run the object made (its uid in the document), or
    the HTTP-door run Fleet made the object for (:data:`MIRROR_OF`)."""
    shown = mirror_of(obj)
    if shown:
        return shown == run_uid and not hub_uid(manifest)
    return hub_uid(manifest) == str(meta(obj).get("uid") or "")


def hub_uid(manifest: Mapping[str, Any]) -> str:
    """The hub uid a stored job's document carries ("" for a job of the HTTP door)."""
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(HUB_UID) or "")


def policy_document(obj: Mapping[str, Any]) -> JSON:
    """A hub PropagationPolicy as a stored policy's document."""
    m = meta(obj)
    out_meta: JSON = {"name": m.get("name"), "namespace": m.get("namespace")}
    labels = m.get("labels")
    if isinstance(labels, Mapping) and labels:
        out_meta["labels"] = dict(labels)
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": out_meta,
        "spec": obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {},
    }


def tree_document(obj: Mapping[str, Any]) -> JSON:
    """A hub ElasticQuotaTree as the document ``PUT /api/v1/quota-tree`` takes."""
    m = meta(obj)
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {"name": m.get("name"), "namespace": m.get("namespace")},
        "spec": obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {},
    }


# Status ----------------------------------------------------------------------------------

#: Fleet's states, in the order a job passes them; each is a condition once reached.
_ORDER: Final = ("Queued", "Admitted", "Dispatched", "Running")
_ENDS: Final = {
    "Succeeded": "Succeeded",
    "Failed": "Failed",
    "Cancelled": "Cancelled",
    "Preempted": "Preempted",
}


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What Fleet knows of one hub job, read from its store and published view."""

    state: str
    queue: str
    cluster: str | None
    reason: str
    #: when each state was last entered (seconds since the epoch)
    since: Mapping[str, float]
    #: the member object's status (None: not read, or no member object)
    member: Mapping[str, Any] | None = None


def rfc3339(seconds: float) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(facts: JobFacts) -> list[JSON]:
    """Fleet's conditions for a job in ``facts.state`` (see the module docstring)."""
    out: list[JSON] = []
    state = facts.state
    reached = set(_ORDER[: _ORDER.index(state) + 1]) if state in _ORDER else set()
    if state in ("Succeeded", "Failed"):
        reached = set(_ORDER)
    for name in _ORDER:
        if name not in reached:
            continue
        message = ""
        if name == "Queued":
            message = f"queued in {facts.queue}"
            if state == "Queued" and facts.reason:
                message += f": {facts.reason}"
        elif name == "Admitted" and facts.cluster:
            message = f"admitted to member {facts.cluster}"
        elif name == "Dispatched" and facts.cluster:
            message = f"created in member {facts.cluster}"
        out.append(_condition(name, "True", name, message, facts.since.get(name)))
    if state in _ENDS:
        message = facts.reason if state != "Succeeded" else ""
        out.append(_condition(_ENDS[state], "True", state, message, facts.since.get(state)))
    return out


def _condition(kind: str, status: str, reason: str, message: str, when: float | None) -> JSON:
    out: JSON = {"type": kind, "status": status, "reason": reason, "message": message}
    if when is not None:
        out["lastTransitionTime"] = rfc3339(when)
        out["lastUpdateTime"] = rfc3339(when)
    return out


def job_status(facts: JobFacts) -> JSON:
    """The hub object's whole ``status``: the member's, then Fleet's on top."""
    status: JSON = {}
    member = facts.member or {}
    for key, value in member.items():
        if key != "conditions":
            status[key] = value
    member_conditions = [dict(c) for c in member.get("conditions") or [] if isinstance(c, Mapping)]
    theirs = {c.get("type") for c in member_conditions}
    # Fleet's first, then the member's (newer), each type once: the member's wins.
    status["conditions"] = [
        c for c in conditions(facts) if c["type"] not in theirs
    ] + member_conditions
    return status


def invalid_status(message: str) -> JSON:
    """The status of a hub job Fleet refused: nothing runs."""
    return {"conditions": [_condition("Invalid", "True", "InvalidSpec", message, None)]}


def binding_message(cluster: str, pods: Sequence[str]) -> str:
    """The walkthrough's binding result: the member, then the pods per role."""
    counts: dict[str, int] = {}
    for pod in pods:
        role = pod.rpartition("-")[0] or pod
        counts[role.lower()] = counts.get(role.lower(), 0) + 1
    roles = " ".join(f"{{{role} {n}}}" for role, n in counts.items())
    return f"Binding has been scheduled successfully. Result: {{{cluster}:0,[{roles}]}}"


# Queues ----------------------------------------------------------------------------------


def queue_name(path: Sequence[str]) -> str:
    """The Queue object's name for the quota-tree node at ``path`` (root first)."""
    joined = "-".join(path).lower()
    digest = hashlib.sha256("/".join(path).encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    suffix = "".join(alphabet[b % len(alphabet)] for b in digest[:5])
    return f"{joined[: 63 - 6]}-{suffix}"


def queue_object(name: str, node: str, path: Sequence[str]) -> JSON:
    """A Queue object's metadata and spec (its status is written apart)."""
    spec: JSON = {"path": "/".join(path), "queuePolicy": "Priority"}
    if len(path) > 1:
        spec["parent"] = "/".join(path[:-1])
    return {
        "apiVersion": QUEUE_API,
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": QUEUE_NAMESPACE,
            "labels": {QUEUE_NODE_LABEL: node[:63]},
        },
        "spec": spec,
    }


def queue_status(
    min_: Mapping[str, str],
    max_: Mapping[str, str] | None,
    used: Mapping[str, str],
    borrowed: Mapping[str, str],
    admitted: int,
    pending: int,
) -> JSON:
    out: JSON = {
        "min": dict(min_),
        "used": dict(used),
        "borrowed": dict(borrowed),
        "admitted": admitted,
        "pending": pending,
    }
    if max_ is not None:
        out["max"] = dict(max_)
    return out
