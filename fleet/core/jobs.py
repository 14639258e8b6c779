"""Jobs as the core sees them: gangs of pods with a queue, a priority and a request.

Theory of operation: a submitted PyTorchJob is turned (outside the core, in
``fleet.manifests``) into one frozen :class:`Job`.  The core never looks at YAML.
A job is a list of replica groups (``Master``, ``Worker``); each replica is a
pod with the same per-pod :class:`~fleet.core.resources.Resources`, named
``<role>-<index>``.  A role may be two groups, the second's indices going on
from the first's (``first``), when the gang needs some of its pods before
those of other roles.  Its *gang size* (``min_members``) is how many pods, the
first ones in placement order, must be placed at the same time for it to
start; a gang job starts with all its pods when they fit and with at
least ``min_members`` otherwise.  A non-gang (incremental) job may start with
one pod and grow later.

Priority classes map names to integers; a negative priority is opportunistic.

GPU types: a job may use any leaf type (no type named), exactly one
(``gpu_sku``), or any of several (``gpu_skus``, in the order they are tried,
and ``gpu_terms``, the terms they were chosen by, for the reasons).  A job of
several types is tried on one type at a time (:meth:`Job.on`: ``gpu_sku`` set,
``gpu_skus`` kept), so that its quota charge types its GPUs by the type it is
placed on (``gpu.fleet.io/<type>``) and a typed ``max`` holds for that type;
the running job is that narrowed job, and a job queued again asks for all its
types again (:meth:`Job.asked`).  :attr:`Job.gpu_types` is what the placers
read: the types a job may be placed on now (empty: any).

A job may name its *user* (:attr:`Job.user`, empty: none): who submitted it,
whose per-user limits of its queue (``limits.perUser``,
:mod:`fleet.core.user_limits`) it counts against.  The shell decides who that
is; the core only compares names.
A job may carry its own deadline (``active_deadline``: seconds of run time,
from its kind's ``activeDeadlineSeconds``; None: none): the core ends a job
whose run time reaches it (:mod:`fleet.core.run_limits`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

from fleet.core import resources
from fleet.core.resources import Resources

DEFAULT_PRIORITY_CLASSES: Final[Mapping[str, int]] = {
    "crit": 120,
    "prod": 100,
    "test": 10,
    "oppo": -1,
}
DEFAULT_PRIORITY_CLASS: Final = "test"
#: Priority classes whose jobs are non-preemptible unless the job says otherwise.
NON_PREEMPTIBLE_BY_DEFAULT: Final = frozenset({"crit"})


class Mode(StrEnum):
    """How an admitted job is charged and how safe it is from preemption."""

    GUARANTEED = "guaranteed"  # within its queue's min: never reclaimed
    BORROWED = "borrowed"  # above min, within max: reclaimable, placed like opportunistic
    OPPORTUNISTIC = "opportunistic"  # negative priority: only max-jobs charged


@dataclass(frozen=True, slots=True)
class ReplicaGroup:
    """``count`` identical pods of one role (``Master`` or ``Worker``).

    ``first`` is the index of the group's first pod: a role may be split into
    two groups placed apart (a Volcano task's ``minAvailable`` pods, then its
    other pods after every task's minimum), the second going on from the
    first's last index, so that a role's pods are still ``role-0`` up.
    """

    role: str
    count: int
    per_pod: Resources
    first: int = 0
    #: the hash, computed once: a job's shape, hashed by every memory of the
    #: cycle, holds its groups
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        h = hash(self.role) ^ (self.count * 1_000_003) ^ hash(self.per_pod)
        if self.first:  # the hash of a group that starts at 0 is what it always was
            h ^= self.first * 998_244_353
        object.__setattr__(self, "_hash", h)

    def __hash__(self) -> int:
        # Agrees with the generated equality; written here so that the compiled
        # core compiles it.
        return self._hash

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled by its fields, and hashed afresh where it is unpickled (a
        # string's hash differs from one interpreter to the next).
        return (ReplicaGroup, (self.role, self.count, self.per_pod, self.first))

    @property
    def gpus(self) -> int:
        return self.per_pod.amounts.get(resources.GPU, 0)


@dataclass(frozen=True, slots=True)
class Pod:
    """One replica: ``Worker-3`` and its per-pod request."""

    name: str
    role: str
    index: int
    request: Resources

    @property
    def gpus(self) -> int:
        return self.request.amounts.get(resources.GPU, 0)


@dataclass(frozen=True, slots=True)
class Job:
    """A queued or running job, immutable; state lives in the scheduler."""

    key: str  # "namespace/name"
    queue: str  # leaf queue (= virtual cluster name in member clusters)
    priority: int
    seq: int  # submission order; earlier first among equal priorities
    groups: tuple[ReplicaGroup, ...]
    min_members: int = 0  # 0 = all pods (a strict gang)
    gang: bool = True  # False: pods may start one at a time
    preemptible: bool = True
    gpu_sku: str | None = None
    clusters: frozenset[str] | None = None  # allowed member clusters; None = any
    priority_class: str = DEFAULT_PRIORITY_CLASS
    #: HiveD pinned cell: the job runs only inside the physical cell with this id.
    pinned_cell_id: str | None = None
    #: Pods to start with at most (elastic ``Worker.replicas`` plus masters);
    #: 0 = all.  The job may grow to all its pods later (``maxReplicas``).
    target: int = 0
    #: The queue came from the namespace's leaf (not ``schedulingPolicy.queue``),
    #: so the job follows its namespace when the tree moves it.
    queue_from_namespace: bool = False
    #: The GPU types the job accepts when they are several, in the order they are
    #: tried (empty: one type, ``gpu_sku``, or any); with ``gpu_sku`` also set, the
    #: job is narrowed to that one of them (:meth:`on`).
    gpu_skus: tuple[str, ...] = ()
    #: The GPU attribute terms the types were chosen by, as a human reads them
    #: (empty: none but an exact type); the waiting reasons name them.
    gpu_terms: str = ""
    #: Who submitted the job, for its queue's per-user limits (empty: nobody named,
    #: no per-user limit applies).
    user: str = ""
    #: The job's own deadline: seconds of run time, counted from admission and
    #: over every run (:mod:`fleet.core.run_limits`); None: none.
    active_deadline: float | None = None
    #: Pods by placement order: masters first, then workers (computed).
    pods: tuple[Pod, ...] = field(init=False, repr=False, compare=False)
    #: Quota charge of every pod, and of the smallest start (computed, shared).
    request: Resources = field(init=False, repr=False, compare=False)
    gang_request: Resources = field(init=False, repr=False, compare=False)
    #: How many pods must start together, at least one (computed).
    gang_size: int = field(init=False, repr=False, compare=False)
    #: How many pods the first admission asks for at most (computed).
    start_size: int = field(init=False, repr=False, compare=False)
    #: The leaf types the job may be placed on now: ``gpu_sku``, else ``gpu_skus``
    #: (empty: any type) (computed).
    gpu_types: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        pods = _expand(self.groups)
        object.__setattr__(self, "pods", pods)
        n = len(pods)
        if not self.gang:
            gang = 1 if pods else 0
        elif self.min_members <= 0 or self.min_members > n:
            gang = n
        else:
            gang = self.min_members
        object.__setattr__(self, "gang_size", gang)
        start = n if self.target <= 0 or self.target > n else max(self.target, gang)
        object.__setattr__(self, "start_size", start)
        object.__setattr__(self, "request", _charge(pods, self.gpu_sku))
        object.__setattr__(self, "gang_request", _charge(pods[:gang], self.gpu_sku))
        types = (self.gpu_sku,) if self.gpu_sku else self.gpu_skus
        object.__setattr__(self, "gpu_types", types)

    def __lt__(self, other: Job) -> bool:
        """Queue order (:func:`sort_key`): sorted lists of jobs bisect without a
        key function, which would build a tuple for every comparison."""
        if self.priority != other.priority:
            return self.priority > other.priority
        return self.seq < other.seq

    # Written out (the dataclass's own, field for field): the compiled core gives
    # a class that writes one comparison a native slot for all of them, and the
    # generated equality would not be reached (tests/core/test_job_order.py
    # holds these to the fields).
    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__ or not isinstance(other, Job):
            return NotImplemented
        return self._compared() == other._compared()

    def __hash__(self) -> int:
        return hash(self._compared())

    def _compared(self) -> tuple[object, ...]:
        return (
            self.key,
            self.queue,
            self.priority,
            self.seq,
            self.groups,
            self.min_members,
            self.gang,
            self.preemptible,
            self.gpu_sku,
            self.clusters,
            self.priority_class,
            self.pinned_cell_id,
            self.target,
            self.queue_from_namespace,
            self.gpu_skus,
            self.gpu_terms,
            self.user,
            self.active_deadline,
        )

    @property
    def size(self) -> int:
        return len(self.pods)

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def opportunistic(self) -> bool:
        return self.priority < 0

    def request_of(self, pods: tuple[Pod, ...] | list[Pod]) -> Resources:
        """Quota charge of running ``pods``: their sum, SKU-typed, plus one job."""
        if pods is self.pods:
            return self.request
        return _charge(tuple(pods), self.gpu_sku)

    @property
    def shape(self) -> tuple[object, ...]:
        """What makes two jobs interchangeable for admission ("unfeasible key").

        Two jobs of one shape ask the same quota and the same placement question,
        so within one cycle the answer to one is the answer to the other.
        """
        return (
            self.queue,
            self.groups,
            self.gang_size,
            self.gang,
            self.priority,
            self.preemptible,
            self.gpu_sku,
            self.clusters,
            self.pinned_cell_id,
            self.target,
            self.gpu_skus,
            self.gpu_terms,
        )

    def on(self, sku: str) -> Job:
        """The job narrowed to one of its several GPU types (tried, then run, on it)."""
        return dataclasses.replace(self, gpu_sku=sku)

    def asked(self) -> Job:
        """The job as it asks to be queued: a narrowed job of several types widened again."""
        if self.gpu_skus and self.gpu_sku:
            return dataclasses.replace(self, gpu_sku=None)
        return self

    @property
    def gpu_ask(self) -> str:
        """The GPU types the job asks for, for a human (empty: any type): ``A`` or
        ``A or B (terms)``."""
        types = self.gpu_skus or ((self.gpu_sku,) if self.gpu_sku else ())
        text = " or ".join(types)
        return f"{text} ({self.gpu_terms})" if text and self.gpu_terms else text


@functools.lru_cache(maxsize=4096)
def _expand(groups: tuple[ReplicaGroup, ...]) -> tuple[Pod, ...]:
    """The pods of some replica groups; identical jobs share one tuple (memory)."""
    pods: list[Pod] = []
    for group in groups:
        for i in range(group.first, group.first + group.count):
            pods.append(Pod(f"{group.role}-{i}", group.role, i, group.per_pod))
    return tuple(pods)


@functools.lru_cache(maxsize=4096)
def _charge(pods: tuple[Pod, ...], sku: str | None) -> Resources:
    """Sum of the pods' requests, the SKU-typed GPU count, plus one job (shared)."""
    total: dict[str, int] = {resources.MAX_JOBS: 1}
    for pod in pods:
        for name, amount in pod.request.items():
            total[name] = total.get(name, 0) + amount
    gpus = total.get(resources.GPU, 0)
    if sku and gpus:
        typed = resources.typed_gpu(sku)
        total[typed] = total.get(typed, 0) + gpus
    return Resources(total)


def position(jobs: list[Job], job: Job, lo: int = 0, hi: int = -1) -> int:
    """``bisect_left`` of ``job`` in ``jobs`` (sorted in queue order) within
    ``[lo, hi)`` (``hi`` -1: to the end), comparing the fields as
    :meth:`Job.__lt__` does, without the generic comparison protocol."""
    if hi < 0:
        hi = len(jobs)
    priority = job.priority
    seq = job.seq
    while lo < hi:
        mid = (lo + hi) // 2
        other = jobs[mid]
        if other.priority > priority or (other.priority == priority and other.seq < seq):
            lo = mid + 1
        else:
            hi = mid
    return lo


def sort_key(job: Job) -> tuple[int, int]:
    """Queue order: higher priority first, then earlier submission."""
    return (-job.priority, job.seq)
