"""Bulk waits: the jobs behind a waiting one that provably wait too, decided together.

Theory of operation: when a job of a BestEffortFIFO queue cannot start, the
cycle's fair order would pop its queue again at once and try the next job,
with nothing changed in between.  The functions here decide, for the jobs
behind it, what those trials would decide, without making them:

* :func:`wait_all`: behind a job that a full ``max`` stopped (in the
  borrowing pass also the room under it owed to guaranteed work, ADR 0030
  and 0036), the jobs that the same ``max`` provably stops wait at once, up
  to the first job that may start.  A whole tail is decided from the queue's
  counters (:class:`~fleet.core.state.QueueState`) in a few lookups, whatever
  its length, and parked as one :class:`~fleet.core.waiting.ParkedTail`.
* :func:`rigid_run`: behind a non-preemptible job that its queue's ``min``
  stopped, the non-preemptible jobs the ``min`` stops too, found from the
  queue's index of such jobs in a few bisections (:func:`park_rigid_run`)
  and parked as one :class:`~fleet.core.waiting.ParkedRun`.
* :func:`park_rigid_head`: a queue's head of non-preemptible jobs that the
  ``min`` stops every one of, parked whole, its first job included, before
  any is tried (the guaranteed pass only).

With parking off (:class:`~fleet.core.cycle_memory.Shortcuts`), each job
behind is checked and given its own reason, as a full scan would; with bulk
waits off, none of this runs and every job is tried
(``tests/core/test_decisions_as_full_trial.py`` compares the two).
"""

from __future__ import annotations

from fleet.core.cycle_context import CycleRun, Seen
from fleet.core.jobs import Job, position, sort_key
from fleet.core.quota import NON_PREEMPTIBLE_MIN, QuotaBlock
from fleet.core.state import QueueState
from fleet.core.waiting import QUOTA_MIN, ParkedRun, ParkedTail, tail_category, tail_reason


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
        run.wait(job, text, QUOTA_MIN)
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
    reasons: dict[int, tuple[str, str]] = {}  # one text per distinct need
    for job in jobs[at + 1 : stop]:
        need = job.gang_request.amounts.get(r, 0)
        why = reasons.get(need)
        if why is None:
            why = reasons[need] = (tail_reason(block, need), tail_category(block, need))
        run.wait(job, why[0], why[1])
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
