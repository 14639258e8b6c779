"""The interface every member cluster backend implements, and what passes through it.

Theory of operation: the scheduler loop decides in the core, records the
decision, and only then acts on a member through :class:`MemberCluster`:
:meth:`~MemberCluster.create` a :class:`DispatchedJob` (the PyTorchJob with
its placement: every pod's node and GPU indices, so creating also binds) and
:meth:`~MemberCluster.delete` it (a preemption or a cancellation).  What then
happens in the member comes back as :data:`MemberEvent` values from
:meth:`~MemberCluster.watch`, which the loop turns into the core's events
(``Started``, ``Finished``, ``Stopped``, ``NodeHealthChanged``).  The loop
does not know which backend it talks to: the simulated one (:mod:`.sim`)
and a Kubernetes one behave the same through this interface.

A member described by its Nodes' labels (``spec.topology``) also reports its
node list, as the topology reads it (:class:`NodesObserved`: each node's
name, labels and GPU, cpu and memory amounts), after its first list and then
whenever it changes; the loop builds the member's cells again from it.  A
backend that follows its cell config's nodes (:class:`FollowsNodes`) is told
when they change, and says which of them it found bad.

Acting is idempotent, so that the loop can simply act again after a crash:

* a job is known to a member by its key (``namespace/name``) and its object
  there is named :func:`member_object_name` of the key, always the same;
* creating a job whose key exists with the same ``uid`` does nothing; with
  another ``uid`` it raises :class:`ClusterConflict` (an older incarnation of
  the key must be deleted first);
* deleting a job that is not there does nothing.

Events of one member arrive in the order they happened, each with the time
(``at``, by the service's clock) the member saw it.  Every incarnation of a
key (one ``uid``) reports at most one :class:`JobStarted` (all its pods run),
and then exactly one end: :class:`JobFinished` (it ended by itself) or
:class:`JobStopped` (it was deleted and its pods are gone); the ``uid`` on
each event tells incarnations apart.  Events wait in the member until they
are read; one consumer reads them.

Errors form one family under :class:`ClusterError`:
:class:`ClusterUnavailable` (try again later, or elsewhere),
:class:`ClusterConflict` (the key belongs to another incarnation) and
:class:`ClusterRejected` (the member refuses the job as it is; trying again
does not help).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from fleet.core.placement import PodPlacement

if TYPE_CHECKING:
    from fleet.manifests.topology import Topology

#: The longest object name :func:`member_object_name` gives: Kubeflow names a
#: replica's pod and service ``<job>-worker-<index>``, and with up to 10 000
#: replicas (``-worker-9999``, 12 characters) those stay DNS labels (63).
MEMBER_NAME_MAX_LENGTH: Final = 51

#: Hex digits of the key's SHA-256 that end every member object name.
MEMBER_NAME_HASH_LENGTH: Final = 8

_NOT_IN_LABEL = re.compile(r"[^a-z0-9-]+")


# Errors ------------------------------------------------------------------------------


class ClusterError(Exception):
    """Something went wrong in or with member ``cluster``."""

    def __init__(self, cluster: str, message: str) -> None:
        super().__init__(f"{cluster}: {message}")
        self.cluster = cluster
        self.message = message


class ClusterUnavailable(ClusterError):
    """The member cannot be reached or does not answer: try again later, or elsewhere."""


class ClusterConflict(ClusterError):
    """The key exists in the member with another ``uid`` (an older incarnation)."""


class ClusterRejected(ClusterError):
    """The member refuses the job as it is; trying again does not help."""


# Names -------------------------------------------------------------------------------


def split_key(key: str) -> tuple[str, str]:
    """``(namespace, name)`` of a job key ``namespace/name``; ValueError if it is not one."""
    namespace, sep, name = key.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"a job key is namespace/name, not {key!r}")
    return namespace, name


def member_object_name(key: str) -> str:
    """The name of job ``key``'s object in a member: a DNS-1035 label, the same every time.

    ``namespace-name``, lowercased, with every run of characters other than
    letters, digits and ``-`` made one ``-``, a ``j`` in front unless it starts
    with a letter (Kubeflow wants a letter first), cut to leave room for the
    suffix, and then ``-`` and the first :data:`MEMBER_NAME_HASH_LENGTH` hex
    digits of the key's SHA-256.  The suffix is always there: ``a-b/c`` and
    ``a/b-c`` would otherwise both be ``a-b-c``.  At most
    :data:`MEMBER_NAME_MAX_LENGTH` characters.
    """
    namespace, name = split_key(key)
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:MEMBER_NAME_HASH_LENGTH]
    readable = _NOT_IN_LABEL.sub("-", f"{namespace}-{name}".lower())
    if not readable[:1].isalpha():
        readable = "j" + readable
    readable = readable[: MEMBER_NAME_MAX_LENGTH - MEMBER_NAME_HASH_LENGTH - 1].rstrip("-")
    return f"{readable}-{digest}"


# What is sent ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DispatchedJob:
    """A job as a member gets it: who it is, where its pods go, and its PyTorchJob.

    ``key`` is ``namespace/name``; ``uid`` tells this incarnation of the key
    from earlier ones; ``pods`` place every pod (node and GPU indices);
    ``manifest`` is the PyTorchJob as a mapping (read-only: members copy what
    they change), where members find annotations such as
    ``fleet.io/simulated-duration``.  ``manifest`` is left out of the hash.
    ``started`` is when the job started running, if it did before it is
    created again (after Fleet restarted): members that run jobs in process
    count its run from then.
    """

    key: str
    uid: str
    cluster: str
    queue: str
    pods: tuple[PodPlacement, ...]
    manifest: Mapping[str, Any] = field(hash=False)
    started: float | None = None

    def __post_init__(self) -> None:
        split_key(self.key)
        if not self.uid:
            raise ValueError(f"job {self.key}: the uid is empty")
        if not self.cluster:
            raise ValueError(f"job {self.key}: the cluster is empty")
        if not self.pods:
            raise ValueError(f"job {self.key}: no pod is placed")
        names = [p.pod for p in self.pods]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"job {self.key}: pods placed twice: {', '.join(twice)}")
        if not isinstance(self.manifest, Mapping):
            raise ValueError(f"job {self.key}: the manifest is not a mapping")

    @property
    def namespace(self) -> str:
        return split_key(self.key)[0]

    @property
    def name(self) -> str:
        return split_key(self.key)[1]

    @property
    def object_name(self) -> str:
        """The name of its object in the member (:func:`member_object_name`)."""
        return member_object_name(self.key)

    @property
    def annotations(self) -> Mapping[str, object]:
        """``metadata.annotations`` of the manifest (empty when it has none)."""
        metadata = self.manifest.get("metadata")
        if not isinstance(metadata, Mapping):
            return {}
        annotations = metadata.get("annotations")
        return annotations if isinstance(annotations, Mapping) else {}


# What comes back ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    """Whether the member answers, and what it says (or why not)."""

    reachable: bool
    message: str = ""


@dataclass(frozen=True, slots=True)
class JobStarted:
    """Every pod of the job runs."""

    cluster: str
    key: str
    uid: str
    at: float


@dataclass(frozen=True, slots=True)
class JobFinished:
    """The job ended by itself: succeeded, or failed with ``reason``."""

    cluster: str
    key: str
    uid: str
    at: float
    succeeded: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class JobStopped:
    """The job was deleted (a preemption or a cancellation) and its pods are gone."""

    cluster: str
    key: str
    uid: str
    at: float


@dataclass(frozen=True, slots=True)
class NodeHealth:
    """A node of the member went bad, or is healthy again."""

    cluster: str
    node: str
    healthy: bool
    at: float


@dataclass(frozen=True, slots=True)
class JobRestarting:
    """The job's pods keep failing and restarting (``restarting``), or it runs well again."""

    cluster: str
    key: str
    uid: str
    at: float
    restarting: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MemberReadiness:
    """The member became ready (Fleet may dispatch there), or not, and why not."""

    cluster: str
    ready: bool
    reason: str
    at: float


@dataclass(frozen=True, slots=True)
class ObservedNode:
    """One Node of a member as the topology reads it: its name, labels, and its
    GPU (``nvidia.com/gpu``, ``gpu.fleet.io/<product>``), ``cpu`` and ``memory``
    amounts as Kubernetes quantities."""

    name: str
    labels: Mapping[str, str]
    capacity: Mapping[str, str]

    def document(self) -> dict[str, Any]:
        """As a ``status.nodes`` entry of a MemberCluster."""
        return {"name": self.name, "labels": dict(self.labels), "capacity": dict(self.capacity)}


@dataclass(frozen=True, slots=True)
class NodesObserved:
    """The member's nodes that count for its topology changed: all of them, by name."""

    cluster: str
    nodes: tuple[ObservedNode, ...]
    at: float


MemberEvent = (
    JobStarted
    | JobFinished
    | JobStopped
    | NodeHealth
    | JobRestarting
    | MemberReadiness
    | NodesObserved
)


# The interface -----------------------------------------------------------------------


@runtime_checkable
class FollowsNodes(Protocol):
    """A backend that keeps the health of its cell config's nodes."""

    def follow(self, nodes: Sequence[str], topology: Topology | None) -> list[str]:
        """The member's cell config now has ``nodes`` (and, for a member described by
        its Nodes, reads them through ``topology``; None: it reports no node list).

        Returns the nodes among them that are bad now (as last reported), for
        the new placer to mark bad at once; a removed node is forgotten, a new
        one's health is reported as it changes from healthy.
        """
        ...


class QueueWatch:
    """A member's events read from its queue; ends at the closing mark (None), which it
    leaves in the queue for other readers."""

    def __init__(self, events: asyncio.Queue[MemberEvent | None]) -> None:
        self._events = events

    def __aiter__(self) -> QueueWatch:
        return self

    async def __anext__(self) -> MemberEvent:
        event = await self._events.get()
        if event is None:
            self._events.put_nowait(None)
            raise StopAsyncIteration
        return event


class MemberCluster(Protocol):
    """One member cluster, as the scheduler loop sees it."""

    @property
    def name(self) -> str:
        """The member's name (``MemberCluster`` metadata.name)."""
        ...

    async def create(self, job: DispatchedJob) -> None:
        """Create ``job`` with its pods where ``job.pods`` places them.

        Nothing happens when the key exists with the same uid.  Raises
        :class:`ClusterConflict` when it exists with another uid,
        :class:`ClusterRejected` when the member refuses the job and
        :class:`ClusterUnavailable` when it cannot be reached.
        """
        ...

    async def resize(self, job: DispatchedJob) -> None:
        """Job ``job.key``, created before, now runs with ``job.pods`` (it grew or shrank).

        Idempotent; nothing happens for a job this member does not run with
        that uid.  A member that cannot apply it now applies it later (or when
        ``create`` is called again with the same job, as after a restart).
        """
        ...

    async def delete(self, key: str) -> bool:
        """Delete job ``key``; its pods stop.

        True when the job had not ended: a :class:`JobStopped` follows once
        its pods are gone.  False when there was nothing to stop (no such
        job, or it had ended and reported so): no event follows.  Raises
        :class:`ClusterUnavailable` when the member cannot be reached.
        """
        ...

    def watch(self) -> AsyncIterator[MemberEvent]:
        """The member's events in the order they happened; ends once the member is closed."""
        ...

    def status_of(self, key: str) -> Mapping[str, Any] | None:
        """The ``status`` of job ``key``'s object in the member as last seen (None: no
        object, or a member without objects); the hub shows it under Fleet's."""
        ...

    async def health(self) -> ClusterHealth:
        """Whether the member can be reached now."""
        ...

    async def close(self) -> None:
        """Stop following the member and release what this backend holds; watchers end."""
        ...
