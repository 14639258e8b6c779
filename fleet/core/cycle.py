"""The scheduling cycle: which queued jobs start, where, and whom they preempt.

``cycle(state, now) -> list[Decision]`` is deterministic: no clock (``now`` is
passed in, or the state's clock is used, and stamped on the decisions), no
I/O, no randomness, and every iteration order is explicit.  It applies its
decisions to ``state`` as it goes, so later jobs of the same cycle see the
quota and cells that earlier admissions took.

Theory of operation:

0. **Quota cuts** past ``--quota-cut-grace`` preempt their newest
   over-limit jobs first (:func:`fleet.core.quota_change.expire_cuts`).
1. **Three passes** (:class:`~fleet.core.cycle_context.Pass`).  First every
   queue's work that fits within its ``min`` (guaranteed), then borrowing,
   then opportunistic jobs on what is left: a queue does not borrow what
   another queue is owed in the same cycle, and nothing is started only to be
   reclaimed by a job behind it.  A job that would have to borrow is deferred
   to the second pass together with every job behind it in its queue, so each
   queue keeps its own order.  In the borrowing pass a job that must borrow
   starts only on room that the guaranteed jobs still ahead in the pass (of
   the other queues under each limited node above it) are not owed
   (:mod:`fleet.core.owed`, ADR 0030): otherwise it would be started and then
   reclaimed by them in the same pass, as Kueue admits a cycle's entries that
   fit without borrowing before those that borrow.  If a job admitted earlier
   in the cycle still has to make room for a later one (a placement conflict
   the quota could not foresee), its admission is withdrawn (a ``Wait``
   "displaced by ...") rather than reported as started and preempted.
2. **Fair order across queues** (:func:`serve`, :class:`FairOrder`).  In each pass, queues sit in
   a heap (:mod:`fleet.core.fair_heap`) keyed by their *share*: the largest
   ratio, over the resources the queue's ``min`` names, of what it uses to
   what it is guaranteed (a queue without ``min`` uses its ``max``; without
   either it sorts last); with ``fairSharing`` in the tree, what it held
   lately (its decayed usage) over its weight (:mod:`fleet.core.fair_share`).
   The queue furthest below its share is served first; its key is
   recomputed after each admission (lazily: a stale key is re-pushed when
   popped).  Many gangs are admitted per cycle, not one head
   per queue.  Within a queue, jobs are taken in priority order, then
   submission order.  A ``StrictFIFO`` queue stops at the first job that
   cannot start; a ``BestEffortFIFO`` queue (the default) lets the jobs
   behind it try.  :func:`serve` is the loop over the order; what it does
   with one job is in its named steps: a rigid head parked without a trial
   (:func:`_park_head`), a job that starts (:func:`_started`), is deferred,
   or waits (:func:`_waited`, then the bulk waits or a StrictFIFO queue's
   stop, :func:`_stop_strict`).
3. **Admission** (:mod:`fleet.core.admission`): quota verdict, victims,
   placement (:mod:`fleet.core.cluster_choice`) and an all-or-nothing commit.
4. **Bulk wait and parking** (:mod:`fleet.core.bulk_wait`): the jobs behind a waiting
   one that a full ``max`` (in the borrowing pass also the room under it
   owed to guaranteed work, ADR 0036) provably stops wait at once, up to the
   first job that may start; they are parked as one group with the block
   (:mod:`fleet.core.waiting`).  A whole tail is decided from the queue's
   counters in a few lookups, whatever its length.  Reasons live in the
   state's :class:`~fleet.core.waiting.WaitBook`; a ``Wait`` decision is
   reported only for a reason that changed.  Non-
   preemptible jobs over their queue's ``min`` that follow a failed job wait
   together: the run is found from the queue's index of such jobs in a few
   bisections and parked as one group (``park_rigid_run``; without
   parking, one quota question each: ``rigid_run``); a queue's head of
   such jobs that the ``min`` stops every one of is parked whole, its first
   job included, before any is tried (``park_rigid_head``).  Texts are
   kept from one cycle to the next by the figures they are worded from
   (:mod:`fleet.core.reason_texts`).  The last pass leaves
   out the opportunistic jobs whose placement question no cluster can answer,
   asked once per question (:func:`idle_pass`), parked as one group each.
5. **Growth** (:mod:`fleet.core.growth`) of partially running jobs, last.

The memories that keep a cycle cheap are in :mod:`fleet.core.cycle_memory`;
each can be switched off (:class:`~fleet.core.cycle_memory.Shortcuts`) and
changes no decision.
"""

from __future__ import annotations

import math
from typing import Final

from fleet.core import admission, cluster_choice, growth, quota_change
from fleet.core.bulk_wait import park_rigid_head, rigid_run, wait_all
from fleet.core.cycle_context import CycleRun, Pass, Span
from fleet.core.cycle_memory import ALL_SHORTCUTS, Shortcuts
from fleet.core.decisions import Admit, Decision, Preempt, Wait
from fleet.core.fair_heap import FairHeap
from fleet.core.jobs import Job, sort_key
from fleet.core.owed import Owed
from fleet.core.resources import MAX_JOBS
from fleet.core.state import SchedulerState
from fleet.core.waiting import QUEUE_ORDER, IdleKey

__all__ = ["Admit", "Decision", "Preempt", "Shortcuts", "Wait", "cycle"]


def cycle(
    state: SchedulerState, now: float | None = None, *, shortcuts: Shortcuts = ALL_SHORTCUTS
) -> list[Decision]:
    """Run one scheduling cycle over ``state`` and return its decisions."""
    run = CycleRun(state, state.now if now is None else now, shortcuts)
    state.texts.trim()
    run.decisions.extend(quota_change.expire_cuts(state, run.now))
    guaranteed, opportunistic = _spans(state)
    run.phase = Pass.GUARANTEED
    borrowing = serve(run, guaranteed)
    run.phase = Pass.BORROWING
    run.owed = Owed(state.tree, state.queues, borrowing, incremental=shortcuts.owed_counts)
    serve(run, borrowing)
    run.owed = None
    run.phase = Pass.OPPORTUNISTIC
    last = {k: v for k, v in opportunistic.items() if k not in run.blocked}
    if shortcuts.idle_groups:
        last, lists = idle_pass(run, last)
        serve(run, last, lists)
    else:
        serve(run, last)
    _finish(run)
    growth.grow(run)
    for key in run.admitted_keys():
        run.book.single.pop(key, None)
    state.waiting = run.book
    return run.decisions


def _spans(state: SchedulerState) -> tuple[dict[str, Span], dict[str, Span]]:
    """Per queue with pending jobs, the span of its jobs the guaranteed pass starts
    from (all but the opportunistic ones, ``QueueState.split``) and the span of its
    opportunistic jobs (the last pass's)."""
    guaranteed: dict[str, Span] = {}
    opportunistic: dict[str, Span] = {}
    for name, queue in state.queues.items():
        size = len(queue.pending)
        if not size:
            continue
        split = queue.split()
        if split:
            guaranteed[name] = (0, split)
        if split < size:
            opportunistic[name] = (split, size)
    return guaranteed, opportunistic


def _finish(run: CycleRun) -> None:
    """After the passes: the pending lists drop the jobs admitted, and the admissions
    withdrawn later in the cycle (displaced) are not reported as started."""
    for name, keys in run.admitted.items():
        run.state.drop_pending(name, keys, run.taken)
    if run.displaced:
        run.decisions = [
            d for d in run.decisions if not (isinstance(d, Admit) and d.job in run.displaced)
        ]


def share(run: CycleRun, queue: str) -> float:
    """The queue's fairness key; cached until its usage changes (``run.touch``).

    The ratio of :meth:`~fleet.core.quota.QuotaTree.share_of` (with fair
    share's memory or weights in the tree, :meth:`~fleet.core.fair_share.FairUsage.key`:
    the decayed usage over the weight), or infinity for
    a queue with neither ``min`` nor ``max`` (it sorts last).  Queues below
    their share (ratio under 1) come before those at or above it, as the
    ratio's own order says; a flat number keeps the heap's comparisons cheap.
    """
    known = run.shares.get(queue)
    if known is None:
        known = run.shares[queue] = _share(run.state, queue)
    return known


def _share(state: SchedulerState, queue: str) -> float:
    tree = state.tree
    ratio = state.fair.key(tree, queue) if tree.fair_any else tree.share_of(queue)
    return math.inf if ratio is None else ratio


def serve(
    run: CycleRun, work: dict[str, Span], lists: dict[str, list[Job]] | None = None
) -> dict[str, Span]:
    """One pass over ``work`` (queue -> positions in its pending list) in fair order.

    ``lists`` gives, for some queues, the jobs to go through instead of
    their pending list (the last pass's opportunistic jobs that some cluster
    may take, :func:`idle_pass`).

    Returns, per queue, the jobs deferred to the borrowing pass: from the
    first job that must borrow on, in order, so that a queue's own order
    holds.  A StrictFIFO queue stops at its first job that cannot start; the
    rest wait behind it.

    Each step takes the job :meth:`FairOrder.next` names (its queue's rank,
    its position ``at``): a rigid head the ``min`` stops whole is parked without a trial
    (:func:`_park_head`); otherwise the job is tried (:func:`~fleet.core.admission.admit`)
    and it starts (:func:`_started`), is deferred with the rest of its queue
    to the borrowing pass, or waits (:func:`_waited`: the bulk waits behind
    it, or a StrictFIFO queue's stop).
    """
    order = FairOrder(run, work)
    deferred: dict[str, Span] = {}
    # Only the guaranteed pass meets a queue's rigid head (:func:`_park_head`).
    heads = run.phase is Pass.GUARANTEED and run.owed is None and not lists
    rank = order.next()
    while rank >= 0:
        queue = order.queues[rank]
        jobs = lists.get(order.names[rank], queue.pending) if lists else queue.pending
        i = order.at
        if not (heads and i < queue.rigid_head and _park_head(run, order, rank, i)):
            outcome = admission.admit(run, jobs[i])
            if isinstance(outcome, admission.Started):
                _started(run, order, rank, jobs, i)
            elif isinstance(outcome, admission.Defer):
                # The queue's order holds: this job and every job behind it wait
                # for the borrowing pass.
                deferred[order.names[rank]] = (i, order.ends[rank])
            else:
                capped = isinstance(outcome, admission.OverUserLimit)
                _waited(
                    run, order, rank, jobs, i, outcome.reason, outcome.kind, lists, capped=capped
                )
        rank = order.next()
    return deferred


class FairOrder:
    """The queues of one pass in fair order, and how far the pass is in each.

    Queues sit in a :class:`~fleet.core.fair_heap.FairHeap` by rank
    (:meth:`~fleet.core.cycle_context.CycleRun.ranks`), keyed by their
    :func:`share`; ``cursors`` and ``ends`` (by rank) bound what the pass still
    has to go through in each.  A key gone stale (the queue's usage changed
    since it was pushed) is pushed again when popped.  In the borrowing pass,
    every move of a cursor is told to the owed demand (:mod:`fleet.core.owed`).
    """

    __slots__ = ("at", "cursors", "ends", "heap", "key", "names", "nxt", "owed", "queues", "run")

    def __init__(self, run: CycleRun, work: dict[str, Span]) -> None:
        names, order, queues = run.ranks()
        self.run = run
        self.names = names
        self.queues = queues
        self.owed = run.owed
        # By rank: where each queue of the pass is, and where its span ends.
        self.cursors = [0] * len(names)
        self.ends = [0] * len(names)
        entries: list[tuple[float, int]] = []
        for name, (start, stop) in work.items():
            rank = order[name]
            self.cursors[rank] = start
            self.ends[rank] = stop
            entries.append((share(run, name), rank))
        self.heap = FairHeap(entries)
        #: the key the queue :meth:`next` named was popped with, and the position
        #: of its job
        self.key = 0.0
        self.at = 0
        #: a queue put back that comes out first again, taken at once instead of
        #: pushed and popped (:meth:`again`)
        self.nxt: tuple[float, int] | None = None

    def next(self) -> int:
        """The next job to go through: the rank of its queue, the one furthest below
        its share that still has a job in its span (-1 when the pass is done), and
        its position :attr:`at`; the queue's cursor moves past it."""
        heap = self.heap
        cursors = self.cursors
        while heap or self.nxt is not None:
            nxt = self.nxt
            if nxt is not None:
                key, rank = nxt
                self.nxt = None
            else:
                key, rank = heap.pop()
            name = self.names[rank]
            current = share(self.run, name)
            if current != key:
                heap.push(current, rank)
                continue
            i = cursors[rank]
            if i >= self.ends[rank]:
                continue
            self.key = key
            self.at = i
            cursors[rank] = i + 1
            if self.owed is not None:
                self.owed.moved(name, i + 1)
            return rank
        return -1

    def move(self, rank: int, to: int) -> None:
        """The pass goes on at position ``to`` of the queue (the jobs before it are done)."""
        self.cursors[rank] = to
        if self.owed is not None:
            self.owed.moved(self.names[rank], to)

    def again(self, rank: int, key: float) -> None:
        """Put the queue back in the order at ``key``."""
        self.nxt = _back(self.heap, key, rank)


def _back(heap: FairHeap, share: float, rank: int) -> tuple[float, int]:
    """Put ``(share, rank)`` back into ``heap`` and return the smallest entry, popped:
    that entry itself when it is smaller than every other (one queue has one entry
    at a time)."""
    if heap.first_below(share, rank):
        heap.push(share, rank)
        return heap.pop()
    return share, rank


def _park_head(run: CycleRun, order: FairOrder, rank: int, at: int) -> bool:
    """The guaranteed pass at a queue's rigid head: when its ``min`` stops every job of
    the head, the head from ``at`` on is parked whole, the job at ``at`` with it,
    without a trial (:func:`~fleet.core.bulk_wait.park_rigid_head`), and the queue
    goes on after it.  Whether it was (else the job at ``at`` is tried)."""
    end = order.ends[rank]
    head_end = park_rigid_head(run, order.queues[rank], at, end)
    if head_end is None:
        return False
    order.move(rank, head_end)
    if head_end < end:
        order.again(rank, order.key)
    return True


def _started(run: CycleRun, order: FairOrder, rank: int, jobs: list[Job], at: int) -> None:
    """The job at ``at`` started: where it came from in its queue's pending list is
    kept (the list drops it when the cycle ends), and the queue goes back into the
    order at its new share."""
    if jobs is order.queues[rank].pending:
        run.taken[jobs[at].key] = at
    order.again(rank, share(run, order.names[rank]))


def _waited(
    run: CycleRun,
    order: FairOrder,
    rank: int,
    jobs: list[Job],
    at: int,
    reason: str,
    kind: str,
    lists: dict[str, list[Job]] | None,
    *,
    capped: bool = False,
) -> None:
    """The job at ``at`` waits for ``reason``; then what follows from it.

    A job its user's cap stopped (``capped``: it could start otherwise,
    :class:`~fleet.core.admission.OverUserLimit`) says nothing of the jobs
    behind it: the queue goes on with the next one.

    A StrictFIFO queue stops there (:func:`_stop_strict`).  Otherwise, with bulk
    waits on, the jobs behind it that provably wait too are waited at once
    (:mod:`fleet.core.bulk_wait`): behind a rigid job the ``min`` stopped, the
    rigid run (:func:`~fleet.core.bulk_wait.rigid_run`); behind a job a full
    ``max`` stopped, the tail (:func:`~fleet.core.bulk_wait.wait_all`; not for the
    last pass's lists of jobs some cluster may take).  The queue goes back into
    the order unless its span is done.
    """
    job = jobs[at]
    run.wait(job, reason, kind)
    queue = order.queues[rank]
    if queue.strict_fifo:
        _stop_strict(run, order, rank, job)
        return
    block = run.last_block
    if run.shortcuts.bulk_wait and not capped:
        name = order.names[rank]
        end = order.ends[rank]
        if block is None:
            if not job.preemptible:
                order.move(rank, rigid_run(run, jobs, at + 1, end))
        elif not (lists and name in lists):
            stop = wait_all(run, name, at, end, block)
            if stop > at + 1:
                order.move(rank, stop)
                if stop >= end:
                    return
    order.again(rank, order.key)


def _stop_strict(run: CycleRun, order: FairOrder, rank: int, job: Job) -> None:
    """A StrictFIFO queue stops at ``job``, its first that cannot start: every job
    behind it waits behind it, and the queue is out of the cycle's later passes."""
    name = order.names[rank]
    run.blocked.add(name)
    if order.owed is not None:
        order.owed.finished(name)
    admitted = run.admitted.get(name, set())
    for rest in order.queues[rank].pending:
        if sort_key(rest) > sort_key(job) and rest.key not in admitted:
            why = (
                f"waits its turn behind {job.key}: queue {name} starts its jobs in order "
                "(StrictFIFO)"
            )
            run.wait(rest, why, QUEUE_ORDER)


#: No answer yet (:func:`idle_pass`): an answer is None (some cluster takes the
#: jobs) or why none does, never this.
_UNASKED: Final = "\0unasked"


def idle_pass(run: CycleRun, work: dict[str, Span]) -> tuple[dict[str, Span], dict[str, list[Job]]]:
    """Ask each distinct opportunistic question once as the last pass begins.

    The last pass only takes room (opportunistic jobs preempt nobody), so a
    question that no cluster can answer now (:func:`fleet.core.cluster_choice.idle_question`)
    stays unanswerable to the end of the pass, and is the answer of every
    job that asks it.  A queue qualifies when it is BestEffortFIFO and no node
    on its path limits ``kube-queue/max-jobs`` (the only quota an
    opportunistic job is charged, which the pass's admissions take); its
    opportunistic jobs are grouped by question (``QueueState.idle``).

    With parking on, the jobs of an unanswerable question are parked as one
    group in the book (``WaitBook.idle``) and the pass goes, per qualifying
    queue, only through the others, merged in queue order: the returned
    ``lists`` and their spans.  Most often no cluster answers any question
    of a qualifying queue: that is found from the scheduler's index of groups
    (``SchedulerState.idle_index``, :func:`_none_answered`), one question at
    a time, and then no queue's groups are gone through.  With parking off,
    every job is still tried and gets the remembered answer (the full scan).
    """
    state = run.state
    tree = state.tree
    answers: dict[IdleKey, str | None] = {}
    lists: dict[str, list[Job]] = {}
    out: dict[str, Span] = {}
    qualifying = {
        name
        for name in work
        if not state.queues[name].strict_fifo and not tree.path_limits(name, MAX_JOBS)
    }
    if run.shortcuts.parking and _none_answered(run, qualifying, answers):
        # No qualifying queue has a job to try: each is parked as a whole.
        for name, span in work.items():
            if name in qualifying:
                run.book.idle_queues.add(name)
            else:
                out[name] = span
        for question, why in answers.items():
            if why is not None:
                run.book.idle[question] = why
        return out, lists
    for name, span in work.items():
        queue = state.queues[name]
        if name not in qualifying:
            out[name] = span
            continue
        tried: list[list[Job]] = []
        for key, group in queue.idle.items():
            if key is None:
                tried.append(group)
                continue
            why = answers.get(key, _UNASKED)
            if why == _UNASKED:
                why = answers[key] = cluster_choice.idle_question(run, group[0])
            if why is None:
                tried.append(group)
        if not run.shortcuts.parking:
            out[name] = span
            continue
        run.book.idle_queues.add(name)
        if len(tried) == 1:
            jobs = tried[0]
        elif len(tried) == len(queue.idle):
            jobs = queue.pending[span[0] : span[1]]  # every group: all of them, in order
        else:
            jobs = sorted([job for group in tried for job in group], key=queue.idle_order)
        if jobs:
            lists[name] = jobs
            out[name] = (0, len(jobs))
    if run.shortcuts.parking:
        for key, why in answers.items():
            if why is not None:
                run.book.idle[key] = why
    return out, lists


def _none_answered(run: CycleRun, qualifying: set[str], answers: dict[IdleKey, str | None]) -> bool:
    """Whether no ``qualifying`` queue (:func:`idle_pass`) has an opportunistic job to
    try: none has a group of jobs tried one by one, and no cluster answers any
    question a group of one of them asks.

    The questions are found from the scheduler's index of groups
    (``SchedulerState.idle_index``), not from each queue's groups, and asked
    (into ``answers``) until one is answered.
    """
    state = run.state
    if not qualifying or not all(state.queues[name].idle for name in qualifying):
        return False
    for key, queues in state.idle_index.items():
        if not any(name in qualifying for name in queues):
            continue
        if key is None:
            return False
        why = answers.get(key, _UNASKED)
        if why == _UNASKED:
            queue = state.queues[next(name for name in queues if name in qualifying)]
            why = answers[key] = cluster_choice.idle_question(run, queue.idle[key][0])
        if why is None:
            return False
    return True
