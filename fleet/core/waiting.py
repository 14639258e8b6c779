"""Why each pending job waits, kept per job or per parked group, not per job per cycle.

Theory of operation: a cycle writes a new :class:`WaitBook` into the state
(:attr:`fleet.core.state.SchedulerState.waiting`).  A job the cycle looked at
and left waiting gets its own entry.  A queue's jobs that one full ``max``
provably stops (:func:`fleet.core.bulk_wait.wait_all`), in the borrowing pass
also the room under it that guaranteed work is owed (:class:`Kept`), are
*parked* as one :class:`ParkedTail`: the jobs between two positions of the
queue's order (the whole tail behind one, or a run up to the first job that
may start; not opportunistic) and the quota block that stops them; each
job's text is rendered from the block and its own request when somebody
asks (:func:`tail_reason`), so parking a tail of any length costs the
same.  A job queued after the book was written (a new submission, a
requeued job) has no reason until the next cycle, as before.

A run of non-preemptible jobs that their queue's ``min`` stops
(:func:`fleet.core.bulk_wait.park_rigid_run`) is parked as one
:class:`ParkedRun`: the range of queue order it covers, the ``min`` and the
guaranteed usage of that moment; each job's text is worded from them and
its own request when read, as the quota tree words it.

Opportunistic jobs are parked by their placement question (:func:`idle_key`):
when the cycle's last pass begins it asks each distinct question once, and a
question no cluster can answer is written down once, with its reason, for
every job that asks it (``WaitBook.idle``); the pass does not look at those
jobs (:func:`fleet.core.cycle.idle_pass`).

The cycle reports a :class:`~fleet.core.decisions.Wait` decision only for a
job whose reason changed since the previous book (with parking on; a parked
group reports none); the book answers for every pending job
(:meth:`WaitBook.reason_of`).

Every reason falls in one of a few categories (:data:`CATEGORIES`, what
``fleet_unadmitted_workloads{reason}`` counts).  A reason a job gets on its
own has its category given where its text is made, and the book keeps it by
text (``WaitBook.kinds``: one entry per distinct text, written with the
reason); a parked group's is the group's kind (a tail's full ``max``, or the
room under it owed to guaranteed work; a run's ``min``; an idle question's
placement).  :meth:`WaitBook.category_of` answers for one job from its
reason; the published view asks it only when a job's reason changed
(:mod:`fleet.core.view`), and counts there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from fleet.core import wording
from fleet.core.jobs import Job, sort_key
from fleet.core.quota import MAX, OVER_MAX, QuotaBlock, min_block
from fleet.core.resources import Resources

#: Why a pending job waits, by category (Kueue-like names).  A ``max`` on its path is full:
QUOTA_MAX: Final = "QuotaMax"
#: a non-preemptible job would go beyond its queue's ``min``:
QUOTA_MIN: Final = "QuotaMin"
#: the room it would borrow is owed to guaranteed jobs still queued:
OWED_TO_GUARANTEED: Final = "OwedToGuaranteed"
#: no member cluster has the cells for it now:
NO_CLUSTER_FITS: Final = "NoClusterFits"
#: the member clusters it may use are not ready, or draining:
CLUSTER_NOT_READY: Final = "ClusterNotReady"
#: no member cluster is allowed for it at all:
INADMISSIBLE: Final = "Inadmissible"
#: the jobs that would make room are protected by a minimum runtime:
VICTIMS_PROTECTED: Final = "VictimsProtected"
#: it is behind another job of its queue (StrictFIFO), or was displaced in the cycle:
QUEUE_ORDER: Final = "QueueOrder"
#: its user holds what the queue's ``limits.perUser`` allows:
USER_LIMIT: Final = "UserLimit"
#: no cycle looked at it yet:
NOT_TRIED: Final = "NotYetTried"
#: anything else:
OTHER: Final = "Other"
#: every category, in the order reports list them
CATEGORIES: Final = (
    QUOTA_MAX,
    QUOTA_MIN,
    OWED_TO_GUARANTEED,
    NO_CLUSTER_FITS,
    CLUSTER_NOT_READY,
    INADMISSIBLE,
    VICTIMS_PROTECTED,
    QUEUE_ORDER,
    USER_LIMIT,
    NOT_TRIED,
    OTHER,
)


def block_category(block: QuotaBlock) -> str:
    """The category of a quota block's reason: a ``max`` (full, or still over since
    a tree change), else a ``min``."""
    return QUOTA_MAX if block.kind == MAX or block.kind == OVER_MAX else QUOTA_MIN


#: What an opportunistic job asks every cluster when it is tried: its replica
#: groups, how many pods it starts with, GPU type, pinned cell, allowed clusters.
IdleKey = tuple[object, ...]


def idle_key(job: Job) -> IdleKey | None:
    """The placement question of an opportunistic job, or None if it may start smaller.

    Two jobs with one key ask every placer the same question (an
    opportunistic fit is queue-blind and never preempts), so one answer is
    the answer for all of them.  A job that may start with fewer pods than
    it asks for (``minAvailable``, elastic) is tried on its own.
    """
    start = job.start_size
    if job.gang_size != start:
        return None
    return (job.groups, start, job.gpu_types, job.pinned_cell_id, job.clusters)


@dataclass(frozen=True, slots=True)
class Kept:
    """Why a borrowing job waits: what is left of ``resource`` under ``node``'s ``max``
    is kept for guaranteed jobs still queued in this cycle."""

    node: str
    resource: str
    used: int
    request: int
    limit: int
    leaf: bool

    def __init__(
        self,
        node: str,
        resource: str,
        used: int,
        request: int,
        limit: int,
        leaf: bool,
    ) -> None:
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "resource", resource)
        object.__setattr__(self, "used", used)
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "limit", limit)
        object.__setattr__(self, "leaf", leaf)

    @property
    def reason(self) -> str:
        r = self.resource
        where = "queue " + self.node if self.leaf else "quota group " + self.node
        return (
            f"{where} has room, but it is owed to guaranteed jobs still queued: "
            f"{wording.used_of(r, self.used, self.limit)} used; this job needs "
            f"{wording.figure(r, self.request)} and would borrow it"
        )


def tail_reason(block: QuotaBlock, need: int) -> str:
    """Why a job of a parked tail that asks ``need`` of ``block.resource`` waits.

    A tail is parked on a full ``max`` (:func:`fleet.core.bulk_wait.wait_all`); in
    the borrowing pass also on the room under a ``max`` that other queues'
    guaranteed jobs are owed (:mod:`fleet.core.owed`).  A job that asks more
    than the room left waits on the ``max``; one that asks less would borrow
    what is owed, and waits for that (:class:`Kept`), as its own attempt
    would say.
    """
    b = block
    if b.kind == MAX and need <= b.limit - b.used:
        return Kept(b.node, b.resource, b.used, need, b.limit, b.leaf).reason
    return QuotaBlock(b.node, b.resource, b.used, need, b.limit, b.kind, b.leaf).reason


def tail_category(block: QuotaBlock, need: int) -> str:
    """The category of :func:`tail_reason`'s text for the same ``block`` and ``need``."""
    if block.kind == MAX and need <= block.limit - block.used:
        return OWED_TO_GUARANTEED
    return block_category(block)


def _before(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """``a < b`` for two :func:`~fleet.core.jobs.sort_key` values, compared as ints
    (a comparison of the tuples goes through the generic protocol)."""
    return a[0] < b[0] or (a[0] == b[0] and a[1] < b[1])


@dataclass(frozen=True, slots=True)
class ParkedTail:
    """The non-opportunistic jobs of ``queue`` sorted after ``after`` (and before
    ``until``; None: to the end) wait on ``block``."""

    queue: str
    after: tuple[int, int]
    until: tuple[int, int] | None
    block: QuotaBlock
    #: request -> its text, worded once per distinct request (shared by the tails
    #: parked on the same figures, :meth:`~fleet.core.reason_texts.ReasonTexts.tail_texts`)
    texts: dict[int, str] = field(default_factory=dict, compare=False, repr=False)

    def __init__(
        self,
        queue: str,
        after: tuple[int, int],
        until: tuple[int, int] | None,
        block: QuotaBlock,
        texts: dict[int, str] | None = None,
    ) -> None:
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "until", until)
        object.__setattr__(self, "block", block)
        object.__setattr__(self, "texts", {} if texts is None else texts)

    def holds(self, job: Job, key: tuple[int, int]) -> bool:
        """Whether the tail holds ``job``, at its queue order ``key`` (``sort_key(job)``)."""
        if job.opportunistic:
            return False
        return _before(self.after, key) and (self.until is None or _before(key, self.until))

    def category_for(self, job: Job) -> str:
        """The category of :meth:`reason_for`."""
        return tail_category(self.block, job.gang_request.amounts.get(self.block.resource, 0))

    def reason_for(self, job: Job) -> str:
        need = job.gang_request.amounts.get(self.block.resource, 0)
        text = self.texts.get(need)
        if text is None:
            text = self.texts[need] = tail_reason(self.block, need)
        return text


@dataclass(frozen=True, slots=True)
class ParkedRun:
    """The non-preemptible jobs of ``queue`` sorted in ``[first, stop)`` (``stop``
    None: to the end) wait because they do not fit the queue's ``min``.

    ``floor`` is that ``min`` and ``guaranteed`` the queue's guaranteed usage
    when the run was parked; a job's text is worded from them and its own
    start's request when it is read, as :meth:`~fleet.core.quota.QuotaTree.classify`
    words it (:func:`~fleet.core.quota.min_block`).
    """

    queue: str
    first: tuple[int, int]
    stop: tuple[int, int] | None
    floor: dict[str, int]
    guaranteed: dict[str, int]
    #: request -> its text, worded once per distinct request
    texts: dict[Resources, str] = field(default_factory=dict, compare=False, repr=False)

    def __init__(
        self,
        queue: str,
        first: tuple[int, int],
        stop: tuple[int, int] | None,
        floor: dict[str, int],
        guaranteed: dict[str, int],
        texts: dict[Resources, str] | None = None,
    ) -> None:
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "first", first)
        object.__setattr__(self, "stop", stop)
        object.__setattr__(self, "floor", floor)
        object.__setattr__(self, "guaranteed", guaranteed)
        object.__setattr__(self, "texts", {} if texts is None else texts)

    def holds(self, job: Job, key: tuple[int, int]) -> bool:
        """Whether the run holds ``job``, at its queue order ``key`` (``sort_key(job)``)."""
        return (
            not job.preemptible
            and not job.opportunistic
            and not _before(key, self.first)
            and (self.stop is None or _before(key, self.stop))
        )

    def reason_for(self, job: Job) -> str:
        request = job.request_of(job.pods[: job.start_size])
        text = self.texts.get(request)
        if text is None:
            block = min_block(self.queue, self.floor, self.guaranteed, request)
            text = self.texts[request] = block.reason
        return text


@dataclass(slots=True)
class WaitBook:
    """The current reasons of the waiting jobs; see the module docstring."""

    #: job key -> reason, for jobs looked at one by one
    single: dict[str, str] = field(default_factory=dict)
    #: queue -> its parked tails (runs of jobs a ``max`` stops), in queue order
    tails: dict[str, list[ParkedTail]] = field(default_factory=dict)
    #: queue -> its parked runs of non-preemptible jobs over its ``min``
    runs: dict[str, list[ParkedRun]] = field(default_factory=dict)
    #: idle key -> why no cluster takes its jobs (opportunistic jobs parked by question)
    idle: dict[IdleKey, str] = field(default_factory=dict)
    #: the queues whose opportunistic jobs ``idle`` answers for
    idle_queues: set[str] = field(default_factory=set)
    #: jobs queued since the book was written (no reason yet)
    fresh: set[str] = field(default_factory=set)
    #: reason -> its category, for the reasons in ``single`` (module docstring)
    kinds: dict[str, str] = field(default_factory=dict)

    def category_of(self, job: Job, reason: str) -> str:
        """The category of ``reason``, the reason ``job`` waits (:meth:`reason_of`)."""
        if not reason:
            return NOT_TRIED
        kind = self.kinds.get(reason)
        if kind is not None:
            return kind
        order = sort_key(job)
        tail = self._tail_of(job, order)
        if tail is not None:
            return tail.category_for(job)
        if self._run_of(job, order) is not None:
            return QUOTA_MIN
        if self._idle_reason(job):
            return NO_CLUSTER_FITS
        return OTHER

    def reason_of(self, job: Job) -> str:
        """The reason ``job`` (pending) waits, or "" if no cycle looked at it yet."""
        key = job.key
        if key in self.fresh:
            return ""
        known = self.single.get(key)
        if known is not None:
            return known
        order = sort_key(job)
        tail = self._tail_of(job, order)
        if tail is not None:
            return tail.reason_for(job)
        run = self._run_of(job, order)
        if run is not None:
            return run.reason_for(job)
        return self._idle_reason(job)

    def _tail_of(self, job: Job, order: tuple[int, int]) -> ParkedTail | None:
        """The parked tail holding ``job`` (at queue order ``order``), if any."""
        for tail in self.tails.get(job.queue, ()):
            if tail.holds(job, order):
                return tail
        return None

    def _run_of(self, job: Job, order: tuple[int, int]) -> ParkedRun | None:
        """The parked run holding ``job`` (at queue order ``order``), if any."""
        for run in self.runs.get(job.queue, ()):
            if run.holds(job, order):
                return run
        return None

    def _idle_reason(self, job: Job) -> str:
        if not self.idle or not job.opportunistic or job.queue not in self.idle_queues:
            return ""
        key = idle_key(job)
        return "" if key is None else self.idle.get(key, "")

    def queued(self, job: Job) -> None:
        """``job`` was (re)queued after this book was written: no reason yet."""
        self.single.pop(job.key, None)
        order = sort_key(job)
        if (
            self._tail_of(job, order) is not None
            or self._run_of(job, order) is not None
            or self._idle_reason(job)
        ):
            self.fresh.add(job.key)  # only where a parked tail, run or group would claim it
