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
2. **Fair order across queues** (:func:`serve`).  In each pass, queues sit in
   a heap (:mod:`fleet.core.fair_heap`) keyed by their *share*: the largest
   ratio, over the resources the queue's ``min`` names, of what it uses to
   what it is guaranteed (a queue without ``min`` uses its ``max``; without
   either it sorts last).  The queue furthest below its share is served
   first; its key is recomputed after each admission (lazily: a stale key is
   re-pushed when popped).  Many gangs are admitted per cycle, not one head
   per queue.  Within a queue, jobs are taken in priority order, then
   submission order.  A ``StrictFIFO`` queue stops at the first job that
   cannot start; a ``BestEffortFIFO`` queue (the default) lets the jobs
   behind it try.
3. **Admission** (:mod:`fleet.core.admission`): quota verdict, victims,
   placement (:mod:`fleet.core.cluster_choice`) and an all-or-nothing commit.
4. **Bulk wait and parking** (:func:`wait_all`): the jobs behind a waiting
   one that a full ``max`` (in the borrowing pass also the room under it
   owed to guaranteed work, ADR 0036) provably stops wait at once, up to the
   first job that may start; they are parked as one group with the block
   (:mod:`fleet.core.waiting`).  A whole tail is decided from the queue's
   counters in a few lookups, whatever its length.  Reasons live in the
   state's :class:`~fleet.core.waiting.WaitBook`; a ``Wait`` decision is
   reported only for a reason that changed.  Non-
   preemptible jobs over their queue's ``min`` that follow a failed job wait
   together: the run is found from the queue's index of such jobs in a few
   bisections and parked as one group (:func:`park_rigid_run`; without
   parking, one quota question each: :func:`rigid_run`); a queue's head of
   such jobs that the ``min`` stops every one of is parked whole, its first
   job included, before any is tried (:func:`park_rigid_head`).  Texts are
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
from fleet.core.cycle_context import CycleRun, Pass, Seen, Span
from fleet.core.cycle_memory import ALL_SHORTCUTS, Shortcuts
from fleet.core.decisions import Admit, Decision, Preempt, Wait
from fleet.core.fair_heap import FairHeap
from fleet.core.jobs import Job, position, sort_key
from fleet.core.owed import Owed
from fleet.core.quota import NON_PREEMPTIBLE_MIN, QuotaBlock
from fleet.core.resources import MAX_JOBS
from fleet.core.state import QueueState, SchedulerState
from fleet.core.waiting import IdleKey, ParkedRun, ParkedTail, tail_reason

__all__ = ["Admit", "Decision", "Preempt", "Shortcuts", "Wait", "cycle"]


def cycle(
    state: SchedulerState, now: float | None = None, *, shortcuts: Shortcuts = ALL_SHORTCUTS
) -> list[Decision]:
    """Run one scheduling cycle over ``state`` and return its decisions."""
    run = CycleRun(state, state.now if now is None else now, shortcuts)
    state.texts.trim()
    run.decisions.extend(quota_change.expire_cuts(state, run.now))
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
    for name, keys in run.admitted.items():
        state.drop_pending(name, keys, run.taken)
    if run.displaced:
        run.decisions = [
            d for d in run.decisions if not (isinstance(d, Admit) and d.job in run.displaced)
        ]
    growth.grow(run)
    for key in run.admitted_keys():
        run.book.single.pop(key, None)
    state.waiting = run.book
    return run.decisions


def share(run: CycleRun, queue: str) -> float:
    """The queue's fairness key; cached until its usage changes (``run.touch``).

    The ratio of :meth:`~fleet.core.quota.QuotaTree.share_of`, or infinity for
    a queue with neither ``min`` nor ``max`` (it sorts last).  Queues below
    their share (ratio under 1) come before those at or above it, as the
    ratio's own order says; a flat number keeps the heap's comparisons cheap.
    """
    known = run.shares.get(queue)
    if known is None:
        known = run.shares[queue] = _share(run.state, queue)
    return known


def _share(state: SchedulerState, queue: str) -> float:
    ratio = state.tree.share_of(queue)
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
    """
    names, order, queues = run.ranks()
    # By rank: where each queue of the pass is, and where its span ends.
    cursors = [0] * len(names)
    ends = [0] * len(names)
    entries: list[tuple[float, int]] = []
    for name, (start, stop) in work.items():
        rank = order[name]
        cursors[rank] = start
        ends[rank] = stop
        entries.append((share(run, name), rank))
    heap = FairHeap(entries)
    deferred: dict[str, Span] = {}
    owed = run.owed
    # A queue that goes back into the heap and would come out first again is
    # taken at once (``nxt``) instead of pushed and popped: the heap's order.
    nxt: tuple[float, int] | None = None
    while heap or nxt is not None:
        if nxt is not None:
            key, rank = nxt
            nxt = None
        else:
            key, rank = heap.pop()
        name = names[rank]
        current = share(run, name)
        if current != key:
            heap.push(current, rank)
            continue
        end = ends[rank]
        i = cursors[rank]
        if i >= end:
            continue
        queue = queues[rank]
        jobs = lists.get(name, queue.pending) if lists else queue.pending
        job = jobs[i]
        cursors[rank] = i + 1
        if owed is not None:
            owed.moved(name, i + 1)
        elif i < queue.rigid_head and run.phase is Pass.GUARANTEED and not lists:
            # The queue's rigid head, first job and all, when its min stops them all.
            head_end = park_rigid_head(run, queue, i, end)
            if head_end is not None:
                cursors[rank] = head_end
                if head_end < end:
                    nxt = _back(heap, key, rank)
                continue
        outcome = admission.admit(run, job)
        if isinstance(outcome, admission.Started):
            if jobs is queue.pending:
                run.taken[job.key] = i
            nxt = _back(heap, share(run, name), rank)
            continue
        if isinstance(outcome, admission.Defer):
            # The queue's order holds: this job and every job behind it wait
            # for the borrowing pass.
            deferred[name] = (i, end)
            continue
        run.wait(job, outcome.reason)
        strict = queue.strict_fifo
        block = run.last_block
        if not strict and block is None and not job.preemptible and run.shortcuts.bulk_wait:
            cursors[rank] = rigid_run(run, jobs, i + 1, end)
            i = cursors[rank] - 1  # the last job that waits
            if owed is not None:
                owed.moved(name, cursors[rank])
        if (
            not strict
            and block is not None
            and run.shortcuts.bulk_wait
            and not (lists and name in lists)
        ):
            stop = wait_all(run, name, i, end, block)
            if stop > i + 1:
                cursors[rank] = stop
                if owed is not None:
                    owed.moved(name, stop)
                if stop >= end:
                    continue
        if strict:
            run.blocked.add(name)
            if owed is not None:
                owed.finished(name)
            admitted = run.admitted.get(name, set())
            for rest in queue.pending:
                if sort_key(rest) > sort_key(job) and rest.key not in admitted:
                    run.wait(rest, f"behind {job.key} in StrictFIFO queue {name}")
            continue
        nxt = _back(heap, key, rank)
    return deferred


def _back(heap: FairHeap, share: float, rank: int) -> tuple[float, int]:
    """Put ``(share, rank)`` back into ``heap`` and return the smallest entry, popped:
    that entry itself when it is smaller than every other (one queue has one entry
    at a time)."""
    if heap.first_below(share, rank):
        heap.push(share, rank)
        return heap.pop()
    return share, rank


def rigid_run(run: CycleRun, jobs: list[Job], at: int, end: int) -> int:
    """Wait the non-preemptible jobs from position ``at`` on that their queue's ``min``
    stops, up to the first other job; returns its position.

    A non-preemptible job must fit within its queue's ``min`` and preempts
    nobody to get there, so a job whose every start size is over it waits
    with the quota block's reason, and trying it changes nothing.  The jobs
    that follow a failed one in the same queue are looked at right away (the
    fair order would pop the queue again at once: nothing changed), each with
    one quota question instead of a whole attempt; the run stops at the first
    job that is preemptible or could start.

    With parking on, the run is found from the queue's index of rigid jobs
    and parked as one group (:func:`park_rigid_run`) instead of being walked.
    """
    if run.shortcuts.parking and at < end:
        parked = park_rigid_run(run, jobs, at, end)
        if parked is not None:
            return parked
    tree = run.state.tree
    texts: dict[QuotaBlock, str] = {}  # jobs of one request share a text
    k = at
    while k < end:
        job = jobs[k]
        if job.preemptible or job.opportunistic:
            break
        start = job.start_size
        verdict = tree.classify(
            job.queue, job.request_of(job.pods[:start]), priority=job.priority, preemptible=False
        )
        if not isinstance(verdict, QuotaBlock) or verdict.kind != NON_PREEMPTIBLE_MIN:
            break
        if job.gang_size < start:
            small = tree.classify(
                job.queue, job.gang_request, priority=job.priority, preemptible=False
            )
            if not isinstance(small, QuotaBlock) or small.kind != NON_PREEMPTIBLE_MIN:
                break
        text = texts.get(verdict)
        if text is None:
            text = texts[verdict] = verdict.reason
        run.wait(job, text)
        k += 1
    return k


def park_rigid_run(run: CycleRun, jobs: list[Job], at: int, end: int) -> int | None:
    """:func:`rigid_run` from the queue's indexes: the run parked as one group.

    A job is in the run when it is rigid (not preemptible, not opportunistic)
    and its smallest start does not fit the queue's ``min`` (then neither does
    its largest, and :meth:`~fleet.core.quota.QuotaTree.classify` says so for
    both).  So the run ends at the first job from ``at`` on that is not rigid,
    or is rigid with a smallest start the ``min`` does take.  The first: the
    rigid jobs from ``at`` on are the queue's ``rigid_jobs`` from ``at``'s
    rank on as long as the two lists agree job for job (within the queue's
    rigid head, ``QueueState.rigid_head``, they are one list to its end;
    elsewhere a bisection over that prefix).  The second: one quota question
    per distinct request of the queue's rigid jobs (``rigid_groups``), and a
    bisection in each group that the ``min`` takes; none when the least any
    group asks of some resource is already over what the ``min`` leaves
    (``QueueState.rigid_least``), which is most often so.  The run is parked
    in the book as one
    :class:`~fleet.core.waiting.ParkedRun` (the jobs' texts are worded when
    read) and reports no ``Wait``.  Returns the position where the run ends,
    or None when jobs of equal queue order make the bounds ambiguous (the
    caller walks the run then).
    """
    first = jobs[at]
    if first.preemptible or first.opportunistic:
        return None
    queue = run.state.queues[first.queue]
    if jobs is not queue.pending:
        return None
    if _tied(jobs, at):
        return None
    key = sort_key(first)
    rigid = queue.rigid_jobs
    if at < queue.rigid_head:
        # In the queue's rigid head the two lists are one, up to its end.
        rank = at
        stop = min(end, queue.rigid_head)
    else:
        rank = queue.rigid_rank(first)
        # The longest prefix from ``at`` on where the pending list and the rigid
        # jobs agree (a job out of step means a job that is not rigid came between).
        lo, hi = 1, min(end - at, len(rigid) - rank)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if jobs[at + mid - 1] is rigid[rank + mid - 1]:
                lo = mid
            else:
                hi = mid - 1
        stop = at + lo
    tree = run.state.tree
    # Most often the min stops every group: then none is looked at.
    if not tree.stops_every_rigid(first.queue, queue.rigid_least()):
        for request, group in queue.rigid_groups.items():
            if tree.stops_rigid(first.queue, request):
                continue
            i = position(group, first)
            if i == len(group):
                continue
            starts = group[i]
            if starts is not first and sort_key(starts) == key:
                return None
            # Only a job of the run so far can end it sooner: looked for there.
            stop = at + queue.rigid_rank(starts, rank, rank + stop - at) - rank
    if stop == at:
        return at
    if _tied(jobs, stop):
        return None
    _park_run(run, first.queue, key, sort_key(jobs[stop]) if stop < len(jobs) else None)
    return stop


def park_rigid_head(run: CycleRun, queue: QueueState, at: int, end: int) -> int | None:
    """The queue's rigid head (``QueueState.rigid_head``) from ``at`` on parked as
    one group, the job at ``at`` with it, when the queue's ``min`` stops every
    rigid group (``QuotaTree.stops_every_rigid``); returns where the head ends,
    or None (nothing done) when the ``min`` may take some rigid job, when jobs of
    equal queue order make the bounds ambiguous, or without parking.

    It decides what trying the job at ``at`` and parking the run behind it
    (:func:`rigid_run`) decide: the job would wait on its ``min``
    (a ``NON_PREEMPTIBLE_MIN`` block, worded as the parked run words it), and a
    ``Wait`` is reported for it as for a job looked at alone, when its reason
    changed.  Only the guaranteed pass meets a rigid head: a queue's later passes
    start at a job that may borrow, or at its opportunistic jobs.
    """
    shortcuts = run.shortcuts
    if not (shortcuts.parking and shortcuts.bulk_wait) or queue.strict_fifo:
        return None
    jobs = queue.pending
    first = jobs[at]
    if not run.state.tree.stops_every_rigid(first.queue, queue.rigid_least()):
        return None
    stop = min(end, queue.rigid_head)
    if _tied(jobs, at) or _tied(jobs, stop):
        return None
    after = sort_key(jobs[stop]) if stop < len(jobs) else None
    run.report(first, _park_run(run, first.queue, sort_key(first), after).reason_for(first))
    return stop


def _tied(jobs: list[Job], i: int) -> bool:
    """Whether the jobs at ``i - 1`` and ``i`` share a queue order (:func:`sort_key`),
    so that a parked group's bound between them would be ambiguous."""
    if i <= 0 or i >= len(jobs):
        return False
    a, b = jobs[i - 1], jobs[i]
    return a.priority == b.priority and a.seq == b.seq


def _park_run(
    run: CycleRun, queue: str, first: tuple[int, int], stop: tuple[int, int] | None
) -> ParkedRun:
    """Park the rigid jobs of ``queue`` in ``[first, stop)`` on its ``min`` and
    guaranteed usage now; the runs parked on the same figures, in this cycle or
    an earlier one, share one copy of them and one set of texts
    (:meth:`~fleet.core.reason_texts.ReasonTexts.run_figures`)."""
    floor, guaranteed = run.state.tree.guarantee_of(queue)
    kept_floor, kept_guaranteed, texts = run.state.texts.run_figures(queue, floor, guaranteed)
    parked = ParkedRun(queue, first, stop, kept_floor, kept_guaranteed, texts)
    run.book.runs.setdefault(queue, []).append(parked)
    return parked


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


def _park(run: CycleRun, queue: str, last: Job, until: Job | None, block: QuotaBlock) -> None:
    """Park ``queue``'s jobs behind ``last`` (up to ``until``, or to the end) on ``block``
    (one text per need, shared by the tails parked on the same figures)."""
    stop = None if until is None else sort_key(until)
    run.book.tails.setdefault(queue, []).append(
        ParkedTail(queue, sort_key(last), stop, block, run.state.texts.tail_texts(block))
    )


#: The most jobs :func:`wait_all` walks when it cannot tell the whole tail waits;
#: the job after them is tried, and the walk goes on from there.
WALK = 64


def wait_all(run: CycleRun, queue: str, at: int, end: int, block: QuotaBlock) -> int:
    """Wait the jobs behind position ``at`` (up to ``end``) that ``block`` provably
    stops, as far as they go in a row; returns the position of the first job
    after them (``at + 1`` when none waits, ``end`` when the whole tail does).

    ``block`` is a ``max`` at some node that nothing could make room under
    for the job at ``at`` (in the borrowing pass also the room under a
    ``max`` that guaranteed jobs still ahead in the pass are owed, ADR 0030).
    A job behind it is stopped by the same node unless its smallest start
    fits the room a job of the queue may take there (:func:`_room`), or it
    is within its queue's ``min`` (reclaim may help it), or it asks nothing
    of the block's resource, or it is not preemptible (the ``min`` decides
    for it).  A job that may preempt its queue's running jobs of lower
    priority is stopped only if it would be even with all they hold freed
    (:meth:`~fleet.core.quota.QuotaTree.lower_usage`).
    Such jobs wait without being tried one by one: a job asking more than
    the room left waits on the ``max``, one asking less on the owed room
    (:func:`~fleet.core.waiting.tail_reason`).  When no job behind is an
    exception, the whole tail waits, decided from the smallest need behind
    whatever its length; otherwise the run ends at the first exception (at
    most :data:`WALK` jobs on), which is then tried.

    With parking on (:class:`~fleet.core.cycle_memory.Shortcuts`), the
    smallest need behind comes from the queue's counters
    (:class:`~fleet.core.state.QueueState`) and the run is parked as one
    group (:class:`~fleet.core.waiting.ParkedTail`).  With parking off, every
    job behind is checked and given its own reason, as a full scan would.
    Both ask :func:`_room` at the same moments (only when the room left on
    the ``max`` alone does not settle it), so that the owed counts go on alike.
    """
    if at + 1 >= end:
        return at + 1
    tree = run.state.tree
    lowest = tree.lowest_preemptible_priority(queue)
    state = run.state.queues[queue]
    jobs = state.pending
    r = block.resource
    limit = tree.max_of(block.node)
    if limit is None or r not in limit:
        return at + 1
    room = limit[r] - tree.used_of(block.node, r)
    leaf_min = tree.min_of(queue)
    if leaf_min and r not in leaf_min:
        return at + 1  # the guarantee does not depend on r: cannot rule reclaim out
    # A need up to ``floor`` fits the queue's min: reclaim may make room for it.
    floor = leaf_min[r] - tree.guaranteed_of(queue, r) if leaf_min else -1
    if sort_key(jobs[at + 1]) == sort_key(jobs[at]):
        return at + 1  # where the run starts is ambiguous
    parking = run.shortcuts.parking
    # What a job of the queue may borrow there: asked when the room left on the
    # max does not settle it, and again for a smaller need while not ``exact``.
    usable = room
    exact = run.owed is None
    stop = at + 1
    # The queue is sorted: when the next job may not preempt inside the queue,
    # no job behind may, and the whole tail is judged by its smallest need.
    if lowest is None or jobs[at + 1].priority <= lowest:
        if parking:
            # Most often the queue's smallest need is already too large: then every
            # job behind is stopped, if each asks for some of r and none is rigid.
            smallest = _smallest_need(state, r)
            if smallest > 0 and smallest > max(room, floor) and not state.rigid_behind(jobs[at]):
                _park(run, queue, jobs[at], None, block)
                return end
            least = _least_behind(run, state, at, r)
        else:
            least = _least_rest(jobs[at + 1 : end], r)
        if least is not None and least > floor:
            if least <= room:
                usable, exact = _room(run, queue, block.node, r, room, least)
            if least > usable:
                stop = end
    if stop < end:
        # Not the whole tail: the run up to the first job that may start.  A job
        # that may preempt its queue's lower priorities could free what they hold
        # (``freeable``) under every node of its path.
        freeable: dict[int, int] = {}
        top = min(end, at + 1 + WALK)
        while stop < top:
            job = jobs[stop]
            need = job.gang_request.amounts.get(r, 0)
            if not job.preemptible or need == 0:
                break
            extra = 0
            if lowest is not None and job.priority > lowest:
                known = freeable.get(job.priority)
                if known is None:
                    known = freeable[job.priority] = tree.lower_usage(queue, job.priority, r)
                extra = known
            if need <= floor + extra:
                break
            if need <= usable + extra and not exact:
                usable, exact = _room(run, queue, block.node, r, room, need - extra)
            if need <= usable + extra:
                break
            stop += 1
        if stop == at + 1 or (stop < end and sort_key(jobs[stop]) == sort_key(jobs[stop - 1])):
            return at + 1  # nothing waits, or where the run ends is ambiguous
    if parking:
        _park(run, queue, jobs[at], jobs[stop] if stop < end else None, block)
        return stop
    reasons: dict[int, str] = {}  # one text per distinct need
    for job in jobs[at + 1 : stop]:
        need = job.gang_request.amounts.get(r, 0)
        why = reasons.get(need)
        if why is None:
            why = reasons[need] = tail_reason(block, need)
        run.wait(job, why)
    return stop


#: No counts of needs (read, never written).
_NO_NEEDS: dict[int, int] = {}


def _smallest_need(state: QueueState, r: str) -> int:
    """The smallest need of ``r`` among the queue's pending jobs (not opportunistic)
    when every one of them asks some; else -1."""
    asking, least = state.least_need(r)
    return least if asking and asking == state.split() else -1


def _least_behind(run: CycleRun, state: QueueState, at: int, r: str) -> int | None:
    """The smallest need of ``r`` among the jobs behind position ``at`` of ``state``'s
    pending list (not opportunistic), from its counters less the jobs the cycle
    already looked at; None if one of them is rigid or asks no ``r``."""
    # What the cycle already looked at in this queue (counted once per
    # cycle, as its cursor moves on): what is behind is the rest.
    seen = run.seen.get((state.name, r))
    if seen is None:
        seen = run.seen[(state.name, r)] = Seen()
    counts = seen.needs
    pending = state.pending
    for i in range(seen.upto, at + 1):
        job = pending[i]
        need = job.gang_request.amounts.get(r, 0)
        counts[need] = counts.get(need, 0) + 1
        if not job.preemptible:
            seen.rigid += 1
    if seen.upto <= at:
        seen.upto = at + 1
    if state.rigid > seen.rigid:
        return None
    asking = 0
    least = -1
    for need, n in state.needs.get(r, _NO_NEEDS).items():
        asking += n
        if n > counts.get(need, 0) and (least < 0 or need < least):
            least = need
    if state.split() - asking > counts.get(0, 0):
        return None  # a job behind asks no r
    return None if least < 0 else least


def _least_rest(rest: list[Job], r: str) -> int | None:
    """:func:`_least_behind` from the jobs themselves (the full scan)."""
    least: int | None = None
    for job in rest:
        need = job.gang_request.amounts.get(r, 0)
        if job.opportunistic or not job.preemptible or need == 0:
            return None
        if least is None or need < least:
            least = need
    return least


def _room(run: CycleRun, queue: str, node: str, r: str, room: int, below: int) -> tuple[int, bool]:
    """What of ``r`` a job of ``queue`` that would borrow may take under ``node``'s
    ``max``, and whether exactly: ``room``, less in the borrowing pass what
    guaranteed jobs still ahead are owed there, counted only as far as it takes
    to tell whether it is under ``below`` (:meth:`~fleet.core.owed.Owed.room_for`)."""
    if run.owed is None:
        return room, True
    return run.owed.room_for(queue, node, r, below)
